package chaos

// What the harness reads of the cluster besides the verdict: canaries in
// events and status, and the post-mortem dump.

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
)

// scanCluster looks for canaries in every event and every object's status.
func (h *harness) scanCluster(ctx context.Context) {
	c := h.stack.Client
	evs := &eventsv1.EventList{}
	if err := c.List(ctx, evs); err == nil {
		h.eventsMu.Lock()
		if h.eventsLog == nil {
			h.eventsLog, _ = os.Create(filepath.Join(h.cfg.WorkDir, "logs", "events.log"))
			h.seenEvents = map[string]bool{}
		}
		for i := range evs.Items {
			e := &evs.Items[i]
			b, _ := json.Marshal(e)
			h.canaries.scan("events", fmt.Sprintf("event %s/%s (%s %s)", e.Namespace, e.Name, e.Regarding.Kind, e.Regarding.Name), b)
			// Kept for the post-mortem: a deleted namespace takes its events along.
			if key := string(e.UID) + "/" + e.ResourceVersion; !h.seenEvents[key] && h.eventsLog != nil {
				h.seenEvents[key] = true
				at := e.EventTime.Time
				if e.Series != nil {
					at = e.Series.LastObservedTime.Time
				} else if at.IsZero() {
					at = e.CreationTimestamp.Time
				}
				fmt.Fprintf(h.eventsLog, "%s %s %s/%s %s %s: %s\n", at.UTC().Format("15:04:05"), e.Type, e.Regarding.Namespace,
					e.Regarding.Name, e.Regarding.Kind, e.Reason, e.Note)
			}
		}
		h.eventsMu.Unlock()
	}
	h.scanStatuses(ctx)
}

// scanStatuses looks for canaries in every object's status, and notes the
// pool members and claims it sees (poolLedger).
func (h *harness) scanStatuses(ctx context.Context) {
	c := h.stack.Client
	sbxs := &sandboxv1.SandboxList{}
	if err := c.List(ctx, sbxs); err == nil {
		h.ledger.record(sbxs.Items)
		for _, s := range sbxs.Items {
			b, _ := json.Marshal(s.Status)
			h.canaries.scan("status", "Sandbox "+s.Namespace+"/"+s.Name, b)
		}
	}
	snaps := &sandboxv1.SandboxSnapshotList{}
	if err := c.List(ctx, snaps); err == nil {
		for _, s := range snaps.Items {
			b, _ := json.Marshal(s.Status)
			h.canaries.scan("status", "SandboxSnapshot "+s.Namespace+"/"+s.Name, b)
		}
	}
	forks := &sandboxv1.SandboxForkList{}
	if err := c.List(ctx, forks); err == nil {
		for _, f := range forks.Items {
			b, _ := json.Marshal(f.Status)
			h.canaries.scan("status", "SandboxFork "+f.Namespace+"/"+f.Name, b)
		}
	}
	pools := &sandboxv1.SandboxPoolList{}
	if err := c.List(ctx, pools); err == nil {
		for _, p := range pools.Items {
			b, _ := json.Marshal(p.Status)
			h.canaries.scan("status", "SandboxPool "+p.Namespace+"/"+p.Name, b)
		}
	}
}

// dump writes every object and the emulator's sandboxes and snapshots to
// WorkDir/state/ for the post-mortem of a missed target.
func (h *harness) dump(ctx context.Context) {
	dir := filepath.Join(h.cfg.WorkDir, "state")
	_ = os.MkdirAll(dir, 0o755)
	for name, l := range map[string]client.ObjectList{
		"sandboxes": &sandboxv1.SandboxList{}, "sandboxsnapshots": &sandboxv1.SandboxSnapshotList{},
		"sandboxforks": &sandboxv1.SandboxForkList{}, "sandboxpools": &sandboxv1.SandboxPoolList{}, "namespaces": &corev1.NamespaceList{}, "events": &eventsv1.EventList{},
	} {
		if err := h.stack.Client.List(ctx, l); err == nil {
			b, _ := yaml.Marshal(l)
			_ = os.WriteFile(filepath.Join(dir, name+".yaml"), b, 0o644)
		}
	}
	emu := h.stack.Emulator
	for name, v := range map[string]any{"vercel-sandboxes": emu.LiveSandboxes(), "vercel-sessions": emu.Sessions(), "vercel-snapshots": emu.Snapshots()} {
		b, _ := json.MarshalIndent(v, "", "  ")
		_ = os.WriteFile(filepath.Join(dir, name+".json"), b, 0o644)
	}
	h.logf("state dumped to %s", dir)
}
