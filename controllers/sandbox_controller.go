package controllers

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
	"github.com/getsentry/sandbox-controller/internal/vercel"
)

// Poll delays while Vercel is busy with something the controller waits for.
const (
	sessionStartPoll = time.Second
	setupPoll        = 2 * time.Second
	snapshotRefPoll  = time.Minute
)

// SandboxReconciler makes each Sandbox one Vercel named sandbox.
type SandboxReconciler struct {
	client.Client
	// APIReader reads Secrets uncached: the manager watches only their
	// metadata, so no Secret value is cached.
	APIReader client.Reader
	Vercel    SandboxAPI
	// Classes, when set, gives each object its SandboxClass's Vercel client
	// (Vercel is the client of objects of no class).
	Classes  *ClassClients
	Recorder events.EventRecorder
	// Notifier, when set, announces Ready, Idle and Failed transitions to
	// the namespace's webhook.
	Notifier Notifier
	// PollInterval is how often a running sandbox is observed for drift.
	PollInterval time.Duration
	// MaxConcurrentReconciles bounds parallel reconciles (default 1).
	MaxConcurrentReconciles int
	// BackoffCap caps the retry delay after errors (default one minute).
	BackoffCap time.Duration
	// VercelHealth, when set, requeues the Sandboxes that failed during a
	// Vercel outage as soon as Vercel answers again.
	VercelHealth *VercelHealth
	// Quota, when set, enforces the namespaces' SandboxQuotas: it admits
	// each session start (sandbox_quota.go).
	Quota *QuotaLedger
	// MaxSessionLength is the plan's maximum session length: sessions are
	// never extended beyond it (default DefaultMaxSessionLength).
	MaxSessionLength time.Duration
	// ShutdownWarning is how long before spec.shutdownTime the
	// ShutdownWarning event is emitted (default DefaultShutdownWarning).
	ShutdownWarning time.Duration
	// ReferenceDeadline is how long a snapshotRef to a missing or Failed
	// SandboxSnapshot is waited for before the Sandbox is Failed (default
	// DefaultReferenceDeadline).
	ReferenceDeadline time.Duration

	// ClusterID names this cluster in the owner tags of the Vercel sandboxes
	// it creates (the manager's --cluster-id).
	ClusterID string
	// Shard is the part of the cluster this manager reconciles (--shards,
	// --shard-index); the zero value is all of it.
	Shard Shard
	// RouteBase is the Vercel API base URL: besides https://*.vercel.run,
	// readinessProbe httpGet requests only go to route URLs under
	// RouteBase + "/_routes/" (where the emulator serves routes), never to a
	// URL someone wrote into status.routes.
	RouteBase string
	// MaxProbesPerNamespace bounds the exec readiness probe commands that
	// run at once in one namespace (default DefaultMaxProbesPerNamespace;
	// sandbox_probe.go).
	MaxProbesPerNamespace int

	// DigestKey keys the digests of Secret values in status.secrets
	// (digest_key.go). SetupWithManager loads it from the Secret
	// DigestKeySecret names when it is unset.
	DigestKey       []byte
	DigestKeySecret DigestKeySecret

	// Now is the clock of every lifecycle decision; time.Now when nil. Tests
	// that simulate hours share the emulator's fake clock through it.
	Now func() time.Time

	// sentSecrets remembers the Secret values sent to Vercel, to scrub
	// them from command output after a rotation.
	sentSecrets sentSecrets

	// nextPoll holds, per object, when its running session is next observed
	// in Vercel and which session Vercel showed; reconciles before then
	// (heartbeats, timers) work from status while it names that session. It
	// is lost on restart, which only makes the first reconcile poll.
	nextPoll sync.Map // types.NamespacedName -> pollMark
	// warned holds, per object, the shutdownTime it was warned about.
	warned sync.Map // types.NamespacedName -> time.Time
	// idleWarned holds, per object, the idle deletion time it was warned about.
	idleWarned sync.Map // types.NamespacedName -> time.Time
	// refused holds, per object, the session Vercel refused to extend: its
	// plan maximum is below --max-session-length, so the session is left to
	// end at its deadline instead of being asked again.
	refused sync.Map // types.NamespacedName -> session id
	// ownStops holds, per object, the session this manager stopped and the
	// Ready reason it stopped it with (lifecycle.ownStop).
	ownStops sync.Map // types.NamespacedName -> ownStop
	// probes holds, per object, its readiness probe's state (sandbox_probe.go).
	probes sync.Map // types.NamespacedName -> probeState
	// probeSlots counts each namespace's running exec probe commands.
	probeSlots probeSlots
	// marked remembers pool members seen marked for a claimant, until the
	// cache shows it (sandbox_claim.go).
	marked markedMembers
}

// +kubebuilder:rbac:groups=sandbox.sentry.io,resources=sandboxes,verbs=get;list;watch;update;patch;delete
// +kubebuilder:rbac:groups=sandbox.sentry.io,resources=sandboxes/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=sandbox.sentry.io,resources=sandboxes/finalizers,verbs=update
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Reconcile observes the Vercel sandbox of one Sandbox, decides the next step
// for it and takes that step, and records what it saw in status.
func (r *SandboxReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	sbx := &sandboxv1.Sandbox{}
	defer r.settleQuota(ctx, req.NamespacedName, sbx)
	return skeleton[*sandboxv1.Sandbox]{
		classes:   r.Classes,
		client:    r.Client,
		recorder:  r.Recorder,
		notifier:  r.Notifier,
		finalizer: sandboxv1.SandboxFinalizer,
		pausable:  true,
		labels:    r.clampHeartbeat,
		forget:    r.forget,
		finalize:  r.finalize,
		reconcile: r.reconcileSandbox,
	}.run(ctx, req.NamespacedName, sbx)
}

// clampHeartbeat rewrites a heartbeat annotation far in the future to the
// time it was seen, so the sandbox idles timeoutSeconds after it as after any
// heartbeat, and reports the rewrite in a Warning event. It reports whether
// it changed the annotation; the skeleton writes it with an update, which
// fails on a conflict rather than overwrite a newer heartbeat.
func (r *SandboxReconciler) clampHeartbeat(_ context.Context, sbx *sandboxv1.Sandbox) bool {
	now := r.now()
	t, ok := futureHeartbeat(sbx, now)
	if !ok {
		return false
	}
	seen := now.UTC().Truncate(time.Second)
	sbx.Annotations[sandboxv1.AnnotationLastActivity] = seen.Format(time.RFC3339)
	r.Recorder.Eventf(sbx, nil, corev1.EventTypeWarning, "HeartbeatInFuture", "Observe",
		"The %s heartbeat %s is %s ahead of the controller's clock; recorded as %s",
		sandboxv1.AnnotationLastActivity, t.UTC().Format(time.RFC3339), t.Sub(now).Truncate(time.Second), seen.Format(time.RFC3339))
	return true
}

// reconcileSandbox makes one observation — from status when no look at
// Vercel is due, else from Vercel — and acts on the decision it leads to.
func (r *SandboxReconciler) reconcileSandbox(ctx context.Context, sbx *sandboxv1.Sandbox) (ctrl.Result, error) {
	st := &sbx.Status
	if res, done, err := r.claimStep(ctx, sbx); done {
		return res, err
	}
	fresh := st.VercelName == ""
	if fresh {
		// The name is recorded with the outcome of this reconcile, in its
		// one status write (Ready, for a create that succeeded), not before
		// the create: it derives from the object, so a crash after the
		// create call still finds the sandbox — the next create answers
		// "name exists" and adopts it after checking its owner tag — and a
		// delete looks it up under the derived name (finalize).
		st.VercelName = remoteName(sbx)
		setReady(sbx, readiness{sandboxv1.SandboxCreating, metav1.ConditionFalse, sandboxv1.ReasonCreating, "Creating the Vercel sandbox"})
	} else if name := remoteName(sbx); st.VercelName != name {
		// Status records the name; it does not choose it. Whoever may patch
		// status must not aim this object at another Vercel sandbox.
		r.statusNameIgnored(ctx, sbx, name)
		st.VercelName = name
		r.forgetPoll(client.ObjectKeyFromObject(sbx))
	}

	if err := r.markSnapshotOutdated(ctx, sbx); err != nil {
		return ctrl.Result{}, err
	}
	if err := r.refreshSecrets(ctx, sbx); err != nil {
		return ctrl.Result{}, err
	}
	now := r.now()
	o, ok := r.fromStatus(sbx, now)
	if !ok {
		// An object that looks fresh although this manager saw a session of
		// it is a stale read of the cache (the event of the manager's own
		// label or finalizer write, handled before its status write reached
		// the cache): look in Vercel rather than create blind.
		resp, err := r.getSandbox(ctx, st.VercelName, (fresh && !r.sawAnySession(sbx)) || waitsToCreate(sbx))
		switch {
		case vercel.IsNotFound(err):
			o = observation{state: remoteMissing, fromVercel: true}
		case err != nil:
			return ctrl.Result{}, fmt.Errorf("get sandbox %s: %w", st.VercelName, err)
		default:
			o = r.observe(ctx, sbx, resp)
		}
		// After observe: the mark keeps the session Vercel showed.
		r.polled(sbx, now)
		st.LastHandledReconcileAt = sbx.Annotations[sandboxv1.AnnotationReconcileRequestedAt]
		now = r.now()
	}
	for {
		res, next, err := r.act(ctx, sbx, r.lifecycle(sbx, o, now))
		if next == nil || err != nil {
			settleSecrets(sbx)
			return res, err
		}
		// The action answered with the sandbox's new state (a create, an
		// adoption, a resume): decide again on it.
		r.sawSession(sbx)
		o, now = *next, r.now()
	}
}

// fromStatus is the observation of a reconcile that needs no look at Vercel:
// a running session whose next poll is not due (a heartbeat, an extension or
// shutdown timer), or a stopped one, which is never polled. It reports false
// when Vercel must be observed: the spec changed, a reconcile was requested,
// a poll or the session's deadline is due, or the status is not one of these.
func (r *SandboxReconciler) fromStatus(sbx *sandboxv1.Sandbox, now time.Time) (observation, bool) {
	st := &sbx.Status
	if st.SessionID == "" || st.ObservedGeneration != sbx.Generation ||
		sbx.Annotations[sandboxv1.AnnotationReconcileRequestedAt] != st.LastHandledReconcileAt {
		return observation{}, false
	}
	ready := meta.FindStatusCondition(st.Conditions, sandboxv1.ConditionReady)
	switch {
	case ready == nil:
		return observation{}, false
	case st.Phase == sandboxv1.SandboxRunning && (ready.Status == metav1.ConditionTrue || probeReasons[ready.Reason]):
		if st.StartedAt == nil || st.ExpiresAt == nil || r.pollDue(sbx, now) || !now.Before(st.ExpiresAt.Time) {
			return observation{}, false
		}
		return observation{state: sessionRunning, sessionID: st.SessionID, sameSession: true, start: st.StartedAt.Time, deadline: st.ExpiresAt.Time}, true
	case restingReasons[ready.Reason] != "" && st.Phase == restingReasons[ready.Reason], waitsToResume(sbx):
		return observation{state: sessionStopped, sessionID: st.SessionID, sameSession: true}, true
	}
	return observation{}, false
}

// observe is what Vercel answered about the sandbox: a sandbox that was not
// created for this object, or one whose state it records in status.
func (r *SandboxReconciler) observe(ctx context.Context, sbx *sandboxv1.Sandbox, resp *vercel.SandboxResponse) observation {
	if !r.ownedBy(&resp.Sandbox, sbx) {
		if sbx.Spec.Source.Adopt != nil && sbx.Status.SessionID == "" {
			// Not adopted yet: the adoption decides whether it can be.
			return observation{state: remoteMissing, fromVercel: true}
		}
		return observation{state: remoteForeign, fromVercel: true}
	}
	unrecorded := sbx.Status.SessionID == "" && sbx.Status.BootedFrom == nil
	o := record(sbx, resp, r.now())
	if unrecorded && sbx.Status.BootedFrom != nil {
		r.resolveUnrecorded(ctx, sbx)
	}
	return o
}

// resolveUnrecorded records, for a sandbox found under this object's name
// whose create's status write was lost, what that create had resolved before
// it ran: the snapshotRef (ResolvedRefs) and the content hash booted from.
// Nothing else records them again once the sandbox runs.
func (r *SandboxReconciler) resolveUnrecorded(ctx context.Context, sbx *sandboxv1.Sandbox) {
	booted := sbx.Status.BootedFrom
	snap := r.bootedSnapshot(ctx, sbx, booted.SnapshotID)
	if snap == nil {
		// No reference, or gone or replaced since: ResolvedRefs keeps
		// what was last seen.
		return
	}
	markResolved(&sbx.Status.Conditions, sbx.Generation, fmt.Sprintf("SandboxSnapshot %q exists", snap.Name))
	booted.ContentHash = snap.Status.ContentHash
}

// record copies what Vercel answered into status and returns it as an
// observation.
func record(sbx *sandboxv1.Sandbox, resp *vercel.SandboxResponse, now time.Time) observation {
	st := &sbx.Status
	remote := &resp.Sandbox
	st.CurrentSnapshotID = remote.CurrentSnapshotID
	s := resp.Session
	st.Usage = foldUsage(st.Usage, usageAnswer{vercelName: cmp.Or(remote.Name, st.VercelName), sandbox: remote, session: s, currentSnapshotID: st.CurrentSnapshotID, now: now})
	if s == nil {
		return observation{state: noSession, fromVercel: true}
	}
	if st.BootedFrom == nil && st.SessionID == "" && s.SourceSnapshotID != "" {
		// Adopted (the create's answer was lost): the first session says
		// which snapshot it booted from.
		st.BootedFrom = bootedFrom(sbx, s.SourceSnapshotID)
	}
	o := observation{fromVercel: true, session: s, sessionID: s.ID, sameSession: st.SessionID == s.ID}
	st.SessionID = s.ID
	st.Routes = routes(resp.Routes)
	st.StartedAt = msTime(s.StartedAt)
	st.ExpiresAt = expiresAt(remote, s)
	if remote.Persistent {
		if !hasCondition(st.Conditions, sandboxv1.ConditionResumable, sandboxv1.ReasonSnapshotMissing) || !o.sameSession {
			setCondition(&st.Conditions, sbx.Generation, sandboxv1.ConditionResumable, metav1.ConditionTrue, sandboxv1.ReasonPersistent,
				"Vercel keeps the filesystem when a session stops; a new session resumes it")
		}
	} else {
		msg := "spec.persistent is false: once its session stops, this sandbox cannot run again"
		if recreates(sbx.Spec.RecreatePolicy) {
			msg = fmt.Sprintf("spec.persistent is false: once its session stops, it cannot resume; spec.recreatePolicy %s creates a new Vercel sandbox from spec.source instead", sbx.Spec.RecreatePolicy)
		}
		setCondition(&st.Conditions, sbx.Generation, sandboxv1.ConditionResumable, metav1.ConditionFalse, sandboxv1.ReasonNotPersistent, msg)
	}
	switch s.Status {
	case vercel.SessionPending:
		o.state = sessionPending
	case vercel.SessionStopping, vercel.SessionSnapshotting:
		o.state = sessionStopping
	case vercel.SessionStopped:
		o.state = sessionStopped
	case vercel.SessionFailed, vercel.SessionAborted:
		o.state = sessionFailed
	default:
		o.state = sessionRunning
		// The deadline recorded in status (Vercel's own expiresAt where it
		// sends one), so that a look at Vercel and one at status decide alike.
		o.start, o.deadline = msTimeOf(sessionStart(s)), timeOf(st.ExpiresAt)
	}
	return o
}

// lifecycle gathers what decide weighs about sbx, with observation o.
func (r *SandboxReconciler) lifecycle(sbx *sandboxv1.Sandbox, o observation, now time.Time) lifecycle {
	st := &sbx.Status
	key := client.ObjectKeyFromObject(sbx)
	l := lifecycle{
		obs:            o,
		now:            now,
		stopped:        sbx.Spec.State == sandboxv1.SandboxStateStopped,
		shutdownDelete: sbx.Spec.ShutdownPolicy == sandboxv1.ShutdownDelete,
		specChanged:    st.ObservedGeneration != sbx.Generation,
		activity:       lastActivity(sbx, now),
		idle:           idleWindow(sbx),
		shutdown:       shutdownSchedule(now, sbx.Spec.ShutdownTime, r.shutdownWarning()),
		name:           st.VercelName,
		phase:          st.Phase,
		hadSession:     st.SessionID != "",
		stoppedAt:      timeOf(st.StoppedAt),
		persistent:     !notPersistent(st),
		maxSession:     r.maxSessionLengthOf(sbx),
		refused:        r.extensionRefused(key, o.sessionID),
		pollAt:         now.Add(r.pollInterval()),
	}
	l.deleteAtIdle, l.deleteAfter = idleSettings(sbx)
	l.recreate = sbx.Spec.RecreatePolicy
	l.snapshotOutdated = hasCondition(st.Conditions, sandboxv1.ConditionSnapshotOutdated, sandboxv1.ReasonSnapshotOutdated)
	if c := meta.FindStatusCondition(st.Conditions, sandboxv1.ConditionReady); c != nil {
		l.ready = c.Reason
	}
	if next, ok := r.nextPoll.Load(key); ok {
		l.pollAt = next.(pollMark).at
	}
	if s, ok := r.ownStops.Load(key); ok && s.(ownStop).session == o.sessionID {
		l.ownStop = s.(ownStop).reason
	}
	return l
}

// ownStop is a session this manager stopped, and the Ready reason it
// recorded for the stop.
type ownStop struct{ session, reason string }

// notPersistent reports whether Vercel reported the sandbox as not
// persistent: once its session stops, it cannot run again.
func notPersistent(st *sandboxv1.SandboxStatus) bool {
	return hasCondition(st.Conditions, sandboxv1.ConditionResumable, sandboxv1.ReasonNotPersistent)
}

// bootedFrom records the Vercel snapshot a Sandbox booted from, with the
// SandboxSnapshot that named it, if any. Nil for a Sandbox that did not
// boot from a snapshot.
func bootedFrom(sbx *sandboxv1.Sandbox, snapshotID string) *sandboxv1.BootedFrom {
	src := sbx.Spec.Source
	switch {
	case src.SnapshotRef != nil:
		return &sandboxv1.BootedFrom{SnapshotID: snapshotID, SnapshotName: src.SnapshotRef.Name}
	case src.SnapshotID != nil:
		return &sandboxv1.BootedFrom{SnapshotID: snapshotID}
	}
	return nil
}

// ownedBy reports whether a Vercel sandbox was created or adopted for this
// object by this cluster.
func (r *SandboxReconciler) ownedBy(remote *vercel.Sandbox, sbx *sandboxv1.Sandbox) bool {
	return ownerOf(remote.Tags, r.ClusterID, sbx.UID) == ownedBySelf
}

// statusNameIgnored reports a status.vercelName that is not the name this
// object stands for: someone wrote it there.
func (r *SandboxReconciler) statusNameIgnored(ctx context.Context, sbx *sandboxv1.Sandbox, name string) {
	logf.FromContext(ctx).Info("Ignored a status.vercelName this object does not derive", "recorded", sbx.Status.VercelName, "vercelName", name)
	r.Recorder.Eventf(sbx, nil, corev1.EventTypeWarning, "StatusNameIgnored", "Observe",
		"status.vercelName named Vercel sandbox %q, which this object does not stand for; it is left alone and %s is used", sbx.Status.VercelName, name)
}

// errNeverCreated stands for the read skipped on a Sandbox's first
// reconcile: nothing can exist under a name this object had not recorded,
// because names derive from its UID and are recorded before any create.
var errNeverCreated = &vercel.APIError{Status: http.StatusNotFound, Code: "not_found", Message: "not created yet"}

// getSandbox reads the Vercel sandbox, except on the first reconcile, where
// the read could only answer 404: skipping it halves the Vercel requests and
// the time from create to Ready. Should the name be taken after all (a
// reconcile that ran on a cache not yet showing the recorded name), the
// create answers "name exists" and the sandbox is adopted (see create).
func (r *SandboxReconciler) getSandbox(ctx context.Context, name string, fresh bool) (*vercel.SandboxResponse, error) {
	if fresh {
		return nil, errNeverCreated
	}
	return r.api(ctx).GetSandbox(ctx, name, false)
}

// pollMark is when an object's running session is next observed in Vercel,
// and the session Vercel last showed for it.
type pollMark struct {
	at      time.Time
	session string
}

// polled records that the object was just observed in Vercel.
func (r *SandboxReconciler) polled(sbx *sandboxv1.Sandbox, now time.Time) {
	r.nextPoll.Store(client.ObjectKeyFromObject(sbx), pollMark{now.Add(r.pollInterval()), sbx.Status.SessionID})
}

// sawSession records the session a create or resume answered with as the
// one Vercel showed, so the next reconciles may work from status.
func (r *SandboxReconciler) sawSession(sbx *sandboxv1.Sandbox) {
	key := client.ObjectKeyFromObject(sbx)
	if v, ok := r.nextPoll.Load(key); ok {
		m := v.(pollMark)
		m.session = sbx.Status.SessionID
		r.nextPoll.Store(key, m)
	}
}

// pollDue reports whether the object's running session should be observed:
// its time has come, or status names another session than the one Vercel
// showed. Whoever may patch status could otherwise aim extensions, setup and
// probe commands or a stop at any session of the project.
func (r *SandboxReconciler) pollDue(sbx *sandboxv1.Sandbox, now time.Time) bool {
	v, ok := r.nextPoll.Load(client.ObjectKeyFromObject(sbx))
	if !ok {
		return true
	}
	m := v.(pollMark)
	// A timer may fire a little early; that still counts as due.
	return m.session != sbx.Status.SessionID || !now.Before(m.at.Add(-minRequeue))
}

func (r *SandboxReconciler) forgetPoll(key types.NamespacedName) { r.nextPoll.Delete(key) }

// sawAnySession reports whether this manager saw a session of the object
// (a create, a resume or a poll answered with one) since it last forgot it.
func (r *SandboxReconciler) sawAnySession(sbx *sandboxv1.Sandbox) bool {
	v, ok := r.nextPoll.Load(client.ObjectKeyFromObject(sbx))
	return ok && v.(pollMark).session != ""
}

func (r *SandboxReconciler) forget(key types.NamespacedName) {
	r.nextPoll.Delete(key)
	r.warned.Delete(key)
	r.idleWarned.Delete(key)
	r.refused.Delete(key)
	r.ownStops.Delete(key)
	r.forgetProbe(key)
}

func (r *SandboxReconciler) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

func (r *SandboxReconciler) maxSessionLength() time.Duration {
	if r.MaxSessionLength > 0 {
		return r.MaxSessionLength
	}
	return DefaultMaxSessionLength
}

func (r *SandboxReconciler) shutdownWarning() time.Duration {
	if r.ShutdownWarning > 0 {
		return r.ShutdownWarning
	}
	return DefaultShutdownWarning
}

// sessionTimeoutMs is a new session's timeout: the idle window, within the
// plan maximum.
func (r *SandboxReconciler) sessionTimeoutMs(sbx *sandboxv1.Sandbox, ms int64) int64 {
	if limit := (r.maxSessionLengthOf(sbx) - capSafety).Milliseconds(); ms > limit {
		return limit
	}
	return ms
}

func (r *SandboxReconciler) pollInterval() time.Duration {
	d := r.PollInterval
	if d <= 0 {
		d = time.Minute
	}
	// Jitter spreads the polls of many sandboxes created together.
	return d + time.Duration(rand.Int64N(int64(d)/10+1))
}

// SetupWithManager registers the reconciler. Status-only updates do not
// trigger it; spec, label and annotation changes (annotations carry intent
// such as the activity heartbeat) do.
func (r *SandboxReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if err := indexSandboxes(context.Background(), mgr); err != nil {
		return err
	}
	if len(r.DigestKey) == 0 {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		key, err := LoadDigestKey(ctx, mgr.GetClient(), mgr.GetAPIReader(), r.DigestKeySecret)
		if err != nil {
			return err
		}
		r.DigestKey = key
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&sandboxv1.Sandbox{}, builder.WithPredicates(r.Shard.predicate(), predicate.Or(
			predicate.GenerationChangedPredicate{},
			predicate.LabelChangedPredicate{},
			predicate.AnnotationChangedPredicate{},
		))).
		Watches(&sandboxv1.SandboxSnapshot{}, handler.EnqueueRequestsFromMapFunc(r.snapshotRefRequests)).
		// Metadata only: the cache holds no Secret value, and a new
		// resourceVersion is enough to notice a rotation (sandbox_secrets.go).
		WatchesMetadata(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(r.secretRequests)).
		WatchesRawSource(r.VercelHealth.sandboxRetrySource(mgr.GetCache())).
		WatchesRawSource(r.Quota.sandboxSource()).
		WithOptions(controllerOptions(r.MaxConcurrentReconciles, r.BackoffCap)).
		Named("sandbox").
		Complete(r.Shard.guard(r))
}

func routes(in []vercel.Route) []sandboxv1.SandboxRoute {
	if len(in) == 0 {
		return nil
	}
	out := make([]sandboxv1.SandboxRoute, 0, len(in))
	for _, rt := range in {
		if rt.System {
			continue
		}
		out = append(out, sandboxv1.SandboxRoute{Port: int32(rt.Port), URL: rt.URL})
	}
	return out
}

// expiresAt is the running session's deadline: Vercel's own figure when it
// gives one, else start (or creation) plus the session timeout.
func expiresAt(sb *vercel.Sandbox, s *vercel.Session) *metav1.Time {
	if s.Status != vercel.SessionRunning && s.Status != vercel.SessionPending {
		return nil
	}
	if sb.ExpiresAt > 0 {
		return msTime(sb.ExpiresAt)
	}
	return msTime(sessionDeadline(s))
}

func sessionID(resp *vercel.SandboxResponse) string {
	if resp.Session == nil {
		return ""
	}
	return resp.Session.ID
}
