package controllers

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
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
	// APIReader reads Secrets uncached, so the manager neither lists nor
	// watches Secrets.
	APIReader client.Reader
	Vercel    SandboxAPI
	Recorder  events.EventRecorder
	// PollInterval is how often a running sandbox is observed for drift.
	PollInterval time.Duration
	// MaxConcurrentReconciles bounds parallel reconciles (default 1).
	MaxConcurrentReconciles int
	// BackoffCap caps the retry delay after errors (default one minute).
	BackoffCap time.Duration
	// VercelHealth, when set, requeues the Sandboxes that failed during a
	// Vercel outage as soon as Vercel answers again.
	VercelHealth *VercelHealth
	// MaxSessionLength is the plan's maximum session length: sessions are
	// never extended beyond it (default DefaultMaxSessionLength).
	MaxSessionLength time.Duration
	// ShutdownWarning is how long before spec.shutdownTime the
	// ShutdownWarning event is emitted (default DefaultShutdownWarning).
	ShutdownWarning time.Duration

	// Now is the clock of every lifecycle decision; time.Now when nil. Tests
	// that simulate hours share the emulator's fake clock through it.
	Now func() time.Time

	// nextPoll holds, per object, when its running session is next observed
	// in Vercel; reconciles before then (heartbeats, timers) work from
	// status. It is lost on restart, which only makes the first reconcile poll.
	nextPoll sync.Map // types.NamespacedName -> time.Time
	// warned holds, per object, the shutdownTime it was warned about.
	warned sync.Map // types.NamespacedName -> time.Time
	// refused holds, per object, the session Vercel refused to extend: its
	// plan maximum is below --max-session-length, so the session is left to
	// end at its deadline instead of being asked again.
	refused sync.Map // types.NamespacedName -> session id
}

// +kubebuilder:rbac:groups=sandbox.sentry.io,resources=sandboxes,verbs=get;list;watch;update;patch;delete
// +kubebuilder:rbac:groups=sandbox.sentry.io,resources=sandboxes/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=sandbox.sentry.io,resources=sandboxes/finalizers,verbs=update
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Reconcile observes the Vercel sandbox of one Sandbox, acts at most once to
// bring it towards the spec, and records what it saw in status.
func (r *SandboxReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	return skeleton[*sandboxv1.Sandbox]{
		client:    r.Client,
		recorder:  r.Recorder,
		finalizer: sandboxv1.SandboxFinalizer,
		pausable:  true,
		forget:    r.forget,
		finalize:  r.finalize,
		reconcile: r.reconcileSandbox,
	}.run(ctx, req.NamespacedName, &sandboxv1.Sandbox{})
}

func (r *SandboxReconciler) reconcileSandbox(ctx context.Context, sbx *sandboxv1.Sandbox) (ctrl.Result, error) {
	st := &sbx.Status
	fresh := st.VercelName == ""
	if fresh {
		// The name is recorded before anything is created, so a crash after
		// the create call finds (and adopts) the sandbox instead of making a
		// second one, and a delete always knows what to delete.
		before := sbx.DeepCopy()
		st.VercelName = vercelName(sbx.Namespace, sbx.Name, sbx.UID)
		st.Phase = sandboxv1.SandboxCreating
		setCondition(&st.Conditions, sbx.Generation, sandboxv1.ConditionReady, metav1.ConditionFalse, sandboxv1.ReasonCreating, "Creating the Vercel sandbox")
		if err := r.Status().Patch(ctx, sbx, client.MergeFrom(before)); err != nil {
			return ctrl.Result{}, err
		}
	}

	now := r.now()
	if res, done, err := r.fromStatus(ctx, sbx, now); done {
		return res, err
	}
	resp, err := r.getSandbox(ctx, st.VercelName, fresh)
	if err == nil || vercel.IsNotFound(err) {
		r.polled(sbx, now)
		st.LastHandledReconcileAt = sbx.Annotations[sandboxv1.AnnotationReconcileRequestedAt]
	}
	switch {
	case vercel.IsNotFound(err):
		if st.SessionID != "" {
			return r.reportVanished(sbx), nil
		}
		return r.create(ctx, sbx)
	case err != nil:
		return ctrl.Result{}, fmt.Errorf("get sandbox %s: %w", st.VercelName, err)
	}
	if !r.ownedBy(&resp.Sandbox, sbx) {
		return r.reportNameConflict(sbx), nil
	}
	return r.observe(ctx, sbx, resp)
}

// ownedBy reports whether a Vercel sandbox was created for this object.
func (r *SandboxReconciler) ownedBy(remote *vercel.Sandbox, sbx *sandboxv1.Sandbox) bool {
	return remote.Tags[tagOwnerUID] == string(sbx.UID)
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
	return r.Vercel.GetSandbox(ctx, name, false)
}

// adopt takes over the sandbox a create found under this object's name, if
// its owner tag says it was created for this object.
func (r *SandboxReconciler) adopt(ctx context.Context, sbx *sandboxv1.Sandbox) (ctrl.Result, error) {
	resp, err := r.Vercel.GetSandbox(ctx, sbx.Status.VercelName, false)
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("get sandbox %s: %w", sbx.Status.VercelName, err)
	}
	if !r.ownedBy(&resp.Sandbox, sbx) {
		return r.reportNameConflict(sbx), nil
	}
	return r.observe(ctx, sbx, resp)
}

func (r *SandboxReconciler) create(ctx context.Context, sbx *sandboxv1.Sandbox) (ctrl.Result, error) {
	st := &sbx.Status
	source, ok, err := r.resolveSource(ctx, sbx)
	if err != nil {
		return ctrl.Result{}, err
	}
	if !ok {
		return ctrl.Result{RequeueAfter: snapshotRefPoll}, nil
	}
	secrets := &secretReader{reader: r.APIReader, namespace: sbx.Namespace}
	cfg, err := buildConfig(ctx, secrets, &sbx.Spec)
	if err != nil {
		return ctrl.Result{RequeueAfter: snapshotRefPoll}, err
	}
	req := vercel.CreateSandboxRequest{
		Name:          st.VercelName,
		Resources:     cfg.resources,
		Ports:         cfg.ports,
		Timeout:       r.sessionTimeoutMs(cfg.timeoutMs),
		Env:           cfg.env,
		Persistent:    sbx.Spec.Persistent,
		NetworkPolicy: cfg.networkPolicy,
		Tags:          map[string]string{tagManagedBy: tagManagedByValue, tagOwnerUID: string(sbx.UID)},
	}
	if err := buildSource(ctx, secrets, &source, &req); err != nil {
		return ctrl.Result{RequeueAfter: snapshotRefPoll}, err
	}
	resp, err := r.Vercel.CreateSandbox(ctx, req)
	if vercel.IsConflict(err) {
		return r.adopt(ctx, sbx)
	}
	if err != nil {
		return ctrl.Result{}, redact(fmt.Errorf("create sandbox %s: %w", st.VercelName, err), secrets.values)
	}
	logf.FromContext(ctx).Info("Created Vercel sandbox", "vercelName", st.VercelName, "session", sessionID(resp))
	r.Recorder.Eventf(sbx, nil, corev1.EventTypeNormal, "Created", "Create", "Created Vercel sandbox %s", st.VercelName)
	if id := source.SnapshotID; id != nil {
		st.BootedFrom = bootedFrom(sbx, *id)
	}
	st.ObservedGeneration = sbx.Generation
	return r.observe(ctx, sbx, resp)
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

// observe records the remote state and takes the next step for it.
func (r *SandboxReconciler) observe(ctx context.Context, sbx *sandboxv1.Sandbox, resp *vercel.SandboxResponse) (ctrl.Result, error) {
	st := &sbx.Status
	remote := &resp.Sandbox
	st.CurrentSnapshotID = remote.CurrentSnapshotID
	if st.Setup == nil && len(sbx.Spec.Setup) > 0 {
		// Setup belongs to the session that made the filesystem: the first one.
		st.Setup = &sandboxv1.SetupStatus{SessionID: remote.CurrentSessionID}
	}
	s := resp.Session
	if s == nil {
		return ctrl.Result{RequeueAfter: sessionStartPoll}, nil
	}
	if st.BootedFrom == nil && st.SessionID == "" && s.SourceSnapshotID != "" {
		// Adopted (the create's answer was lost): the first session says
		// which snapshot it booted from.
		st.BootedFrom = bootedFrom(sbx, s.SourceSnapshotID)
	}
	sameSession := st.SessionID == s.ID
	st.SessionID = s.ID
	st.Routes = routes(resp.Routes)
	st.StartedAt = msTime(s.StartedAt)
	st.ExpiresAt = expiresAt(remote, s)
	if remote.Persistent {
		if !hasCondition(st.Conditions, sandboxv1.ConditionResumable, sandboxv1.ReasonSnapshotMissing) || !sameSession {
			setCondition(&st.Conditions, sbx.Generation, sandboxv1.ConditionResumable, metav1.ConditionTrue, sandboxv1.ReasonPersistent,
				"Vercel keeps the filesystem when a session stops; a new session resumes it")
		}
	} else {
		setCondition(&st.Conditions, sbx.Generation, sandboxv1.ConditionResumable, metav1.ConditionFalse, sandboxv1.ReasonNotPersistent,
			"spec.persistent is false: once its session stops, this sandbox cannot run again")
	}
	now := r.now()
	sd := shutdownSchedule(now, sbx.Spec.ShutdownTime, r.shutdownWarning())
	if sd.due && sbx.Spec.ShutdownPolicy == sandboxv1.ShutdownDelete {
		return r.shutdownDelete(ctx, sbx)
	}

	switch s.Status {
	case vercel.SessionPending:
		st.Phase = sandboxv1.SandboxCreating
		setCondition(&st.Conditions, sbx.Generation, sandboxv1.ConditionReady, metav1.ConditionFalse, sandboxv1.ReasonCreating, "Waiting for the session to start")
		return ctrl.Result{RequeueAfter: sessionStartPoll}, nil
	case vercel.SessionStopping, vercel.SessionSnapshotting:
		st.Phase = sandboxv1.SandboxStopping
		setCondition(&st.Conditions, sbx.Generation, sandboxv1.ConditionReady, metav1.ConditionFalse, sandboxv1.ReasonSessionStopped, "The session is stopping")
		return ctrl.Result{RequeueAfter: setupPoll}, nil
	case vercel.SessionStopped:
		return r.observeStopped(ctx, sbx, s, sameSession, sd, now)
	case vercel.SessionFailed, vercel.SessionAborted:
		st.Phase = sandboxv1.SandboxFailed
		setCondition(&st.Conditions, sbx.Generation, sandboxv1.ConditionReady, metav1.ConditionFalse, sandboxv1.ReasonSessionFailed,
			fmt.Sprintf("Session %s %s", s.ID, s.Status))
		return ctrl.Result{}, nil
	}

	// Running.
	st.StoppedAt = nil
	if !wantRunning(sbx, sd) {
		return r.stopSession(ctx, sbx, s.ID, sd, now)
	}
	if st.ObservedGeneration != sbx.Generation {
		if err := r.update(ctx, sbx, s.ID); err != nil {
			return ctrl.Result{}, err
		}
	}
	if done, res, err := r.runSetup(ctx, sbx, s.ID); !done || err != nil {
		return res, err
	}
	st.Phase = sandboxv1.SandboxRunning
	setCondition(&st.Conditions, sbx.Generation, sandboxv1.ConditionReady, metav1.ConditionTrue, sandboxv1.ReasonRunning, fmt.Sprintf("Session %s is running", s.ID))
	// The deadline recorded in status (Vercel's own expiresAt where it sends
	// one), so that this path and the between-polls path decide alike.
	return r.keepAlive(ctx, sbx, s.ID, msTimeOf(sessionStart(s)), st.ExpiresAt.Time, sd, now)
}

// update applies a changed spec to the Vercel sandbox: PATCH changes the
// defaults of future sessions, and the network policy is also applied to the
// running session.
func (r *SandboxReconciler) update(ctx context.Context, sbx *sandboxv1.Sandbox, sessionID string) error {
	secrets := &secretReader{reader: r.APIReader, namespace: sbx.Namespace}
	cfg, err := buildConfig(ctx, secrets, &sbx.Spec)
	if err != nil {
		return err
	}
	req := vercel.UpdateSandboxRequest{Resources: cfg.resources, Timeout: r.sessionTimeoutMs(cfg.timeoutMs), Env: cfg.env, Ports: cfg.ports, NetworkPolicy: cfg.networkPolicy}
	if req.Env == nil {
		req.Env = map[string]string{}
	}
	if req.Ports == nil {
		req.Ports = []int64{}
	}
	resp, err := r.Vercel.UpdateSandbox(ctx, sbx.Status.VercelName, req, false)
	if err != nil {
		return redact(fmt.Errorf("update sandbox %s: %w", sbx.Status.VercelName, err), secrets.values)
	}
	if sessionID != "" {
		np := cfg.networkPolicy
		if np == nil {
			np = &vercel.NetworkPolicy{Mode: vercel.NetworkAllowAll}
		}
		// Only a running session's routes and policy change now; a stopped
		// sandbox gets both with its next session.
		sbx.Status.Routes = routes(resp.Routes)
		if _, err := r.Vercel.UpdateNetworkPolicy(ctx, sessionID, *np); err != nil && !vercel.IsGone(err) {
			return redact(fmt.Errorf("update network policy of session %s: %w", sessionID, err), secrets.values)
		}
	}
	r.Recorder.Eventf(sbx, nil, corev1.EventTypeNormal, "Updated", "Update", "Applied spec generation %d to Vercel sandbox %s", sbx.Generation, sbx.Status.VercelName)
	sbx.Status.ObservedGeneration = sbx.Generation
	return nil
}

func (r *SandboxReconciler) reportVanished(sbx *sandboxv1.Sandbox) ctrl.Result {
	st := &sbx.Status
	if st.Phase != sandboxv1.SandboxFailed || !hasCondition(st.Conditions, sandboxv1.ConditionReady, sandboxv1.ReasonNotFound) {
		r.Recorder.Eventf(sbx, nil, corev1.EventTypeWarning, sandboxv1.ReasonNotFound, "Observe",
			"Vercel sandbox %s no longer exists; it was deleted outside the operator", st.VercelName)
	}
	st.Phase = sandboxv1.SandboxFailed
	st.Routes = nil
	st.ExpiresAt = nil
	setCondition(&st.Conditions, sbx.Generation, sandboxv1.ConditionReady, metav1.ConditionFalse, sandboxv1.ReasonNotFound,
		fmt.Sprintf("Vercel sandbox %s no longer exists; it was deleted outside the operator. Delete and re-create this Sandbox to get a new one.", st.VercelName))
	return ctrl.Result{}
}

func (r *SandboxReconciler) reportNameConflict(sbx *sandboxv1.Sandbox) ctrl.Result {
	st := &sbx.Status
	st.Phase = sandboxv1.SandboxFailed
	setCondition(&st.Conditions, sbx.Generation, sandboxv1.ConditionReady, metav1.ConditionFalse, sandboxv1.ReasonNameConflict,
		fmt.Sprintf("A Vercel sandbox named %s exists but was not created for this object; it is left alone", st.VercelName))
	return ctrl.Result{}
}

// polled records that the object was just observed in Vercel.
func (r *SandboxReconciler) polled(sbx *sandboxv1.Sandbox, now time.Time) {
	r.nextPoll.Store(client.ObjectKeyFromObject(sbx), now.Add(r.pollInterval()))
}

// pollDue reports whether the object's running session should be observed.
func (r *SandboxReconciler) pollDue(key types.NamespacedName, now time.Time) bool {
	v, ok := r.nextPoll.Load(key)
	// A timer may fire a little early; that still counts as due.
	return !ok || !now.Before(v.(time.Time).Add(-minRequeue))
}

func (r *SandboxReconciler) forgetPoll(key types.NamespacedName) { r.nextPoll.Delete(key) }

func (r *SandboxReconciler) forget(key types.NamespacedName) {
	r.nextPoll.Delete(key)
	r.warned.Delete(key)
	r.refused.Delete(key)
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
func (r *SandboxReconciler) sessionTimeoutMs(ms int64) int64 {
	if limit := (r.maxSessionLength() - capSafety).Milliseconds(); ms > limit {
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
	return ctrl.NewControllerManagedBy(mgr).
		For(&sandboxv1.Sandbox{}, builder.WithPredicates(predicate.Or(
			predicate.GenerationChangedPredicate{},
			predicate.LabelChangedPredicate{},
			predicate.AnnotationChangedPredicate{},
		))).
		Watches(&sandboxv1.SandboxSnapshot{}, handler.EnqueueRequestsFromMapFunc(r.snapshotRefRequests)).
		WatchesRawSource(r.VercelHealth.sandboxRetrySource(mgr.GetCache())).
		WithOptions(controllerOptions(r.MaxConcurrentReconciles, r.BackoffCap)).
		Named("sandbox").
		Complete(r)
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

func hasCondition(conds []metav1.Condition, typ, reason string) bool {
	c := meta.FindStatusCondition(conds, typ)
	return c != nil && c.Reason == reason
}

func timeOf(t *metav1.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return t.Time
}

// msTimeOf is a Vercel ms timestamp second-truncated like status; zero for 0.
func msTimeOf(ms int64) time.Time {
	if t := msTime(ms); t != nil {
		return t.Time
	}
	return time.Time{}
}

// redactedError carries an error whose message had secret values removed,
// keeping the original in the chain so errors.As still classifies it.
type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }

// redact returns err with every known secret value removed from its message.
func redact(err error, secrets []string) error {
	msg := scrub(err.Error(), secrets)
	if msg == err.Error() {
		return err
	}
	return &redactedError{msg: msg, err: err}
}

// scrub replaces every known secret value in s, so that an error or output
// that echoes one never reaches status, events or logs.
func scrub(s string, secrets []string) string {
	for _, v := range secrets {
		if len(v) >= 4 {
			s = strings.ReplaceAll(s, v, "[redacted]")
		}
	}
	return s
}
