package controllers

// The reconcile skeleton the three kinds share: read the object (gone: done),
// branch to its deletion, honour a pause, keep the finalizer, run the kind's
// own reconcile, record the reconcile request it handled, and report how it
// ended — the Synced condition, lastError
// and a Warning event for a new error, the retry that fits the error — with
// one status write, skipped when nothing changed.

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
)

// object is one of the three kinds.
type object interface {
	client.Object
	*sandboxv1.Sandbox | *sandboxv1.SandboxSnapshot | *sandboxv1.SandboxFork | *sandboxv1.SandboxPool
}

// skeleton is one kind's reconcile: the steps every kind takes, and the
// kind's own parts.
type skeleton[O object] struct {
	client    client.Client
	recorder  events.EventRecorder
	finalizer string
	// pausable kinds do nothing but report Paused=True while the object
	// carries the sandbox.sentry.io/paused annotation.
	pausable bool
	// forget, when set, drops what the reconciler remembers of an object that
	// is gone or being deleted.
	forget func(types.NamespacedName)
	// labels, when set, adds the labels the kind keeps on its objects (or
	// corrects an annotation) and reports whether it changed any; they are
	// written with the finalizer, in one update.
	labels func(context.Context, O) bool
	// finalize cleans up after an object being deleted; done lets the
	// finalizer go. It is called only while the finalizer is there.
	finalize func(context.Context, O) (done bool, res ctrl.Result, err error)
	// reconcile brings the remote side towards the spec and records in status
	// what it saw.
	reconcile func(context.Context, O) (ctrl.Result, error)
	// notifier, when set, is told of the transitions a status write made
	// (see transitions); it never blocks.
	notifier Notifier
	// classes, when set, resolves the object's SandboxClass: its Vercel
	// client reaches the kind's reconcile and finalize in the context
	// (apiFor), and its name is pinned on the object's label. Nil: every
	// object uses the manager's own client.
	classes *ClassClients
}

// run reconciles the object at key; o is an empty object of the kind.
func (s skeleton[O]) run(ctx context.Context, key types.NamespacedName, o O) (ctrl.Result, error) {
	ctx, after := withAfterStatusWrite(ctx)
	defer after.run()
	if err := s.client.Get(ctx, key, o); err != nil {
		if apierrors.IsNotFound(err) && s.forget != nil {
			s.forget(key)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !o.GetDeletionTimestamp().IsZero() {
		return s.onDeletion(ctx, key, o)
	}
	// The class is resolved and pinned before anything else happens to the
	// object — before a pause or a refusal writes a condition — so that
	// which credentials it uses is decided once, on the first reconcile,
	// and recorded where only the controller may write.
	ctx, b := s.classes.bind(ctx, o)
	if !b.resolved {
		return ctrl.Result{}, b.refused
	}
	if err := s.prepare(ctx, o, b); err != nil {
		return ctrl.Result{}, err
	}
	if s.pausable && o.GetAnnotations()[sandboxv1.AnnotationPaused] == "true" {
		return ctrl.Result{}, s.reportPaused(ctx, o)
	}
	before := o.DeepCopyObject().(O)
	if s.pausable {
		meta.RemoveStatusCondition(statusOf(o).conditions, sandboxv1.ConditionPaused)
	}
	if cerr := b.refused; cerr != nil {
		// Refused by its class (or the class cannot be read): nothing is
		// called in Vercel.
		return s.finish(ctx, before, o, ctrl.Result{}, cerr)
	}
	res, err := s.reconcile(ctx, o)
	err = inClass(ctx, err)
	if err == nil {
		// Every kind's reconcile looks at Vercel afresh for what it has not
		// settled (a Sandbox skips the look only when it has handled the
		// current request), and every change of this annotation triggers one,
		// so a successful reconcile has handled the request.
		*statusOf(o).lastHandledReconcileAt = o.GetAnnotations()[sandboxv1.AnnotationReconcileRequestedAt]
	}
	return s.finish(ctx, before, o, res, err)
}

// onDeletion handles an object being deleted: the kind forgets it, and its
// cleanup runs, with its class's client, while the finalizer holds it.
func (s skeleton[O]) onDeletion(ctx context.Context, key types.NamespacedName, o O) (ctrl.Result, error) {
	if s.forget != nil {
		s.forget(key)
	}
	if !controllerutil.ContainsFinalizer(o, s.finalizer) {
		return ctrl.Result{}, nil
	}
	ctx, b := s.classes.bind(ctx, o)
	if b.refused != nil {
		// The finalizer keeps trying: the remote side is cleaned up with
		// the class's client or not at all.
		return s.finish(ctx, o.DeepCopyObject().(O), o, ctrl.Result{}, b.refused)
	}
	return s.delete(ctx, o)
}

// prepare puts on the object what the controller keeps there before it
// reconciles: the finalizer, the class label b pins, and the kind's labels;
// one update when any of them changed.
func (s skeleton[O]) prepare(ctx context.Context, o O, b binding) error {
	changed := controllerutil.AddFinalizer(o, s.finalizer)
	if b.pin && s.classes.pin(ctx, o, b.name) {
		changed = true
	}
	if s.labels != nil && s.labels(ctx, o) {
		changed = true
	}
	if !changed {
		return nil
	}
	return s.client.Update(ctx, o)
}

// delete runs the kind's cleanup and removes the finalizer once it is done.
// A failed cleanup is reported like any failed reconcile.
func (s skeleton[O]) delete(ctx context.Context, o O) (ctrl.Result, error) {
	if !controllerutil.ContainsFinalizer(o, s.finalizer) {
		return ctrl.Result{}, nil
	}
	before := o.DeepCopyObject().(O)
	done, res, err := s.finalize(ctx, o)
	err = inClass(ctx, err)
	switch {
	case err != nil:
		return s.finish(ctx, before, o, res, err)
	case !done:
		return res, nil
	}
	controllerutil.RemoveFinalizer(o, s.finalizer)
	err = s.client.Update(ctx, o)
	if apierrors.IsConflict(err) {
		// The cache was behind a write, typically a status write of the
		// reconcile before, whose event the predicates drop: an error would
		// wait out the object's backoff (up to a minute, after the failures
		// that kept it), though the remote side is done. Look again soon.
		return ctrl.Result{RequeueAfter: finalizerConflictRetry}, nil
	}
	if err == nil && s.notifier != nil {
		// Announced once the finalizer is off: the object is gone, and its
		// remote side cleaned up.
		if e, ok := deletedEvent(o, time.Now()); ok {
			s.notifier.Enqueue(e)
		}
	}
	return ctrl.Result{}, err
}

// finalizerConflictRetry is how soon a finalize whose finalizer removal
// conflicted runs again.
const finalizerConflictRetry = time.Second

// reportPaused records that reconciling is paused, and does nothing else: no
// Vercel call, no timer.
func (s skeleton[O]) reportPaused(ctx context.Context, o O) error {
	before := o.DeepCopyObject().(O)
	setCondition(statusOf(o).conditions, o.GetGeneration(), sandboxv1.ConditionPaused, metav1.ConditionTrue, sandboxv1.ReasonReconcilePaused,
		fmt.Sprintf("Reconciling is paused by the %s annotation; remove it to resume", sandboxv1.AnnotationPaused))
	return s.patchStatus(ctx, before, o)
}

// finish records the outcome of a reconcile (see reportOutcome), writes
// status when it changed, and returns the retry that fits the error.
func (s skeleton[O]) finish(ctx context.Context, before, o O, res ctrl.Result, err error) (ctrl.Result, error) {
	res, err = reportOutcome(s.recorder, o, res, err)
	if perr := s.patchStatus(ctx, before, o); perr != nil {
		return ctrl.Result{}, perr
	}
	return res, err
}

// patchStatus writes status only when it differs from before, so a reconcile
// that finds nothing to do writes nothing. The transitions the write made are
// announced only after it succeeded: a failed write is retried, and announced
// then.
func (s skeleton[O]) patchStatus(ctx context.Context, before, o O) error {
	if apiequality.Semantic.DeepEqual(statusOf(before).all, statusOf(o).all) {
		return nil
	}
	if err := s.client.Status().Patch(ctx, o, client.MergeFrom(before)); err != nil {
		return err
	}
	if s.notifier != nil {
		for _, e := range transitions(before, o, time.Now()) {
			s.notifier.Enqueue(e)
		}
	}
	announceMilestones(s.recorder, before, o)
	return nil
}

// becameReady reports whether before → after turned Ready to True.
func becameReady(before, after client.Object) bool {
	return !meta.IsStatusConditionTrue(*statusOf(before).conditions, sandboxv1.ConditionReady) &&
		meta.IsStatusConditionTrue(*statusOf(after).conditions, sandboxv1.ConditionReady)
}

// announceMilestones emits a Normal event when a status write made the
// object Ready (with Ready's message), and, for a Sandbox, when its setup
// succeeded: `kubectl describe` and `kubectl events` then tell the story
// from creation to Ready, not only the failures.
func announceMilestones(rec events.EventRecorder, before, after client.Object) {
	if rec == nil {
		return
	}
	if becameReady(before, after) {
		ready := meta.FindStatusCondition(*statusOf(after).conditions, sandboxv1.ConditionReady)
		rec.Eventf(after, nil, corev1.EventTypeNormal, sandboxv1.ConditionReady, "Observe", "%s", truncate(ready.Message, maxEventNote))
	}
	b, ok := before.(*sandboxv1.Sandbox)
	a, _ := after.(*sandboxv1.Sandbox)
	if ok && a.Status.Setup != nil && a.Status.Setup.State == sandboxv1.SetupSucceeded &&
		(b.Status.Setup == nil || b.Status.Setup.State != sandboxv1.SetupSucceeded || b.Status.Setup.SpecHash != a.Status.Setup.SpecHash) {
		rec.Eventf(after, nil, corev1.EventTypeNormal, "SetupSucceeded", "RunCommand", "Setup succeeded: %d command(s) exited 0 in session %s", a.Status.Setup.Completed, a.Status.Setup.SessionID)
	}
}

// statusView is what the skeleton reads and writes of an object's status.
type statusView struct {
	all        any // the whole status, to tell whether it changed
	conditions *[]metav1.Condition
	lastError  **sandboxv1.ErrorStatus
	// lastHandledReconcileAt is the reconcile-requested-at value handled last.
	lastHandledReconcileAt *string
}

func statusOf(o client.Object) statusView {
	switch o := o.(type) {
	case *sandboxv1.Sandbox:
		return statusView{&o.Status, &o.Status.Conditions, &o.Status.LastError, &o.Status.LastHandledReconcileAt}
	case *sandboxv1.SandboxSnapshot:
		return statusView{&o.Status, &o.Status.Conditions, &o.Status.LastError, &o.Status.LastHandledReconcileAt}
	case *sandboxv1.SandboxFork:
		return statusView{&o.Status, &o.Status.Conditions, &o.Status.LastError, &o.Status.LastHandledReconcileAt}
	case *sandboxv1.SandboxPool:
		return statusView{&o.Status, &o.Status.Conditions, &o.Status.LastError, &o.Status.LastHandledReconcileAt}
	}
	panic(fmt.Sprintf("controllers: no status for %T", o))
}

// reportOutcome records how a reconcile ended on the object's status: the
// Synced condition, and lastError with a Warning event when the error is new.
// It turns the error into the retry that fits it (see classify): the wait
// Vercel asked for after a 429, none for a spec Vercel refuses until the spec
// changes, backoff otherwise.
func reportOutcome(rec events.EventRecorder, o client.Object, res ctrl.Result, err error) (ctrl.Result, error) {
	st := statusOf(o)
	if err == nil {
		setCondition(st.conditions, o.GetGeneration(), sandboxv1.ConditionSynced, metav1.ConditionTrue, sandboxv1.ReasonReconciled, "")
		*st.lastError = nil
		return res, nil
	}
	class := classify(err)
	msg := class.text(err)
	setCondition(st.conditions, o.GetGeneration(), sandboxv1.ConditionSynced, metav1.ConditionFalse, class.reason, msg)
	if class.notReady || (class.blocksStart && !meta.IsStatusConditionTrue(*st.conditions, sandboxv1.ConditionReady)) {
		setCondition(st.conditions, o.GetGeneration(), sandboxv1.ConditionReady, metav1.ConditionFalse, class.reason, msg)
	}
	if prev := *st.lastError; prev == nil || prev.Reason != class.reason || prev.Message != truncate(msg, maxErrorMessage) {
		*st.lastError = &sandboxv1.ErrorStatus{Time: metav1.Now(), Reason: class.reason, Message: truncate(msg, maxErrorMessage)}
		rec.Eventf(o, nil, corev1.EventTypeWarning, class.reason, "Reconcile", "%s", truncate(msg, maxEventNote))
	}
	switch {
	case class.retryAfter > 0:
		return ctrl.Result{RequeueAfter: class.retryAfter}, nil
	case class.terminal && o.GetDeletionTimestamp().IsZero():
		return res, reconcile.TerminalError(err)
	}
	// A finalizer keeps trying with backoff, even after an answer that would
	// be terminal for a spec: the object must not hang in Terminating
	// silently, and Synced says why it still does.
	return res, err
}

// Bounds on error text copied into status and events: a Vercel message or
// command output can be long, and an event note over 1 KiB is refused.
const (
	maxErrorMessage = 4096
	maxEventNote    = 1024
)

// controllerOptions are the workqueue settings of every kind: n parallel
// reconciles (at least one), and per-object exponential backoff after errors
// from one second up to backoffCap (default one minute), with jitter.
func controllerOptions(n int, backoffCap time.Duration) controller.Options {
	if backoffCap <= 0 {
		backoffCap = time.Minute
	}
	return controller.Options{
		MaxConcurrentReconciles: max(1, n),
		RateLimiter:             newJitteredBackoff(time.Second, backoffCap),
	}
}

// afterStatusWrite holds what a reconcile does once its status is written
// (or its write failed): the events of its happy path, so that the API
// server serves the status write — which a client waiting for Ready needs —
// before the event writes, which nobody waits for.
type afterStatusWrite struct{ fns []func() }

type afterStatusWriteKey struct{}

func withAfterStatusWrite(ctx context.Context) (context.Context, *afterStatusWrite) {
	a := &afterStatusWrite{}
	return context.WithValue(ctx, afterStatusWriteKey{}, a), a
}

func (a *afterStatusWrite) run() {
	for _, fn := range a.fns {
		fn()
	}
}

// deferToStatusWrite runs fn when the reconcile of ctx has written its
// status; at once outside a reconcile.
func deferToStatusWrite(ctx context.Context, fn func()) {
	if a, ok := ctx.Value(afterStatusWriteKey{}).(*afterStatusWrite); ok {
		a.fns = append(a.fns, fn)
		return
	}
	fn()
}
