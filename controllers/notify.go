package controllers

// Notifications: the transitions a client waits for, announced to the
// namespace's webhook (internal/notify) once their status write succeeded.

import (
	"crypto/sha256"
	"encoding/hex"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
	"github.com/getsentry/sandbox-controller/internal/notify"
)

// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get

// Notifier takes the transitions to announce; Enqueue must not block.
// *notify.Notifier is one.
type Notifier interface {
	Enqueue(notify.Event)
}

// eventTypePrefix starts every CloudEvent type: prefix.<kind>.<transition>,
// kind lower case (sandbox, sandboxsnapshot, sandboxfork).
const eventTypePrefix = "io.sentry.sandbox."

// notifyData is a CloudEvent's data: what a waiting client needs, read from
// status (which holds no Secret value).
type notifyData struct {
	Phase         string                   `json:"phase"`
	Reason        string                   `json:"reason,omitempty"`
	Message       string                   `json:"message,omitempty"`
	Generation    int64                    `json:"generation"`
	SessionID     string                   `json:"sessionID,omitempty"`
	Routes        []sandboxv1.SandboxRoute `json:"routes,omitempty"`
	SnapshotID    string                   `json:"snapshotID,omitempty"`
	Replicas      *int32                   `json:"replicas,omitempty"`
	ReadyReplicas *int32                   `json:"readyReplicas,omitempty"`
}

// transitions lists the events that before → after makes: Ready (the Ready
// condition turned True, or the phase Ready), Idle and Failed (the phase).
// Pure, so that it is table-tested.
func transitions(before, after client.Object, now time.Time) []notify.Event {
	var kind, resource string
	var fired []string
	var data notifyData
	conds := *statusOf(after).conditions
	ready := meta.FindStatusCondition(conds, sandboxv1.ConditionReady)
	var marker *metav1.Time
	if ready != nil {
		marker = &ready.LastTransitionTime
		data.Reason, data.Message = ready.Reason, ready.Message
	}
	switch a := after.(type) {
	case *sandboxv1.Sandbox:
		b := before.(*sandboxv1.Sandbox)
		kind, resource = "sandbox", "sandboxes"
		if becameReady(b, a) {
			fired = append(fired, "ready")
		}
		if b.Status.Phase != sandboxv1.SandboxIdle && a.Status.Phase == sandboxv1.SandboxIdle {
			fired = append(fired, "idle")
		}
		if b.Status.Phase != sandboxv1.SandboxFailed && a.Status.Phase == sandboxv1.SandboxFailed {
			fired = append(fired, "failed")
		}
		data.Phase, data.SessionID, data.Routes = string(a.Status.Phase), a.Status.SessionID, a.Status.Routes
	case *sandboxv1.SandboxSnapshot:
		b := before.(*sandboxv1.SandboxSnapshot)
		kind, resource = "sandboxsnapshot", "sandboxsnapshots"
		fired = phaseChange(string(b.Status.Phase), string(a.Status.Phase), string(sandboxv1.SnapshotReady), string(sandboxv1.SnapshotFailed))
		data.Phase, data.SnapshotID = string(a.Status.Phase), a.Status.SnapshotID
	case *sandboxv1.SandboxFork:
		b := before.(*sandboxv1.SandboxFork)
		kind, resource = "sandboxfork", "sandboxforks"
		fired = phaseChange(string(b.Status.Phase), string(a.Status.Phase), string(sandboxv1.ForkReady), string(sandboxv1.ForkFailed))
		data.Phase, data.Replicas, data.ReadyReplicas = string(a.Status.Phase), &a.Status.Replicas, &a.Status.ReadyReplicas
	}
	data.Generation = after.GetGeneration()
	var out []notify.Event
	for _, t := range fired {
		m := marker
		if s, ok := after.(*sandboxv1.Sandbox); ok && t == "idle" && s.Status.StoppedAt != nil {
			m = s.Status.StoppedAt
		}
		typ := eventTypePrefix + kind + "." + t
		out = append(out, notify.Event{
			Namespace: after.GetNamespace(),
			ID:        transitionID(after, typ, m),
			Type:      typ,
			Source:    "/namespaces/" + after.GetNamespace() + "/" + resource + "/" + after.GetName(),
			Subject:   after.GetName(),
			Time:      now,
			Data:      data,
		})
	}
	return out
}

// deletedEvent is the notification that o is gone (its cleanup done, its
// finalizer removed), for the kinds that announce transitions: a client that
// follows a conversation's Sandbox by webhook learns it ended without a
// watch. Its id is one per object, so a retried removal announces it once.
func deletedEvent(o client.Object, now time.Time) (notify.Event, bool) {
	var kind, resource string
	data := notifyData{Generation: o.GetGeneration()}
	switch a := o.(type) {
	case *sandboxv1.Sandbox:
		kind, resource, data.Phase = "sandbox", "sandboxes", string(a.Status.Phase)
	case *sandboxv1.SandboxSnapshot:
		kind, resource, data.Phase = "sandboxsnapshot", "sandboxsnapshots", string(a.Status.Phase)
	case *sandboxv1.SandboxFork:
		kind, resource, data.Phase = "sandboxfork", "sandboxforks", string(a.Status.Phase)
	default:
		return notify.Event{}, false
	}
	typ := eventTypePrefix + kind + ".deleted"
	return notify.Event{
		Namespace: o.GetNamespace(),
		ID:        transitionID(o, typ, nil),
		Type:      typ,
		Source:    "/namespaces/" + o.GetNamespace() + "/" + resource + "/" + o.GetName(),
		Subject:   o.GetName(),
		Time:      now,
		Data:      data,
	}, true
}

// phaseChange reports "ready" or "failed" when the phase became one of them.
func phaseChange(before, after, ready, failed string) []string {
	switch {
	case before == after:
		return nil
	case after == ready:
		return []string{"ready"}
	case after == failed:
		return []string{"failed"}
	}
	return nil
}

// transitionID is the same for every observation of one transition — the
// object, the event type and when the condition (or the stop) changed — so
// that a receiver drops the duplicates at-least-once delivery makes.
func transitionID(o client.Object, typ string, at *metav1.Time) string {
	h := sha256.New()
	h.Write([]byte(string(o.GetUID()) + "\x00" + typ + "\x00"))
	if at != nil {
		h.Write([]byte(at.UTC().Format(time.RFC3339)))
	}
	return hex.EncodeToString(h.Sum(nil))[:32]
}
