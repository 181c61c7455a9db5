package controllers

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	ctrlevent "sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
	"github.com/getsentry/sandbox-controller/internal/vercel"
)

// Delays of the SandboxClass controller.
const (
	// classVerifyInterval is how often valid credentials are checked again
	// (VerifyProject: one Vercel request per class).
	classVerifyInterval = time.Minute
	// classRetryInterval is how soon invalid credentials, or a class held
	// by its users, are looked at again.
	classRetryInterval = 10 * time.Second
)

// SandboxClassReconciler reports whether Vercel accepts each class's
// credentials (CredentialsValid), counts the objects using it
// (status.inUse), and holds a class being deleted with a finalizer until no
// object uses it.
type SandboxClassReconciler struct {
	client.Client
	Classes  *ClassClients
	Recorder events.EventRecorder
}

// Reconcile checks one SandboxClass.
func (r *SandboxClassReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	cl := &sandboxv1.SandboxClass{}
	if err := r.Get(ctx, req.NamespacedName, cl); err != nil {
		if client.IgnoreNotFound(err) == nil {
			r.Classes.forget(req.Name)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	inUse, err := r.countUsers(ctx, cl.Name)
	if err != nil {
		return ctrl.Result{}, err
	}
	before := cl.DeepCopy()
	cl.Status.InUse = inUse
	cl.Status.ObservedGeneration = cl.Generation
	if !cl.DeletionTimestamp.IsZero() {
		if !controllerutil.ContainsFinalizer(cl, sandboxv1.SandboxClassFinalizer) {
			return ctrl.Result{}, nil
		}
		if inUse > 0 {
			setCondition(&cl.Status.Conditions, cl.Generation, sandboxv1.ConditionReady, metav1.ConditionFalse, sandboxv1.ReasonInUse,
				fmt.Sprintf("Being deleted: %d Sandboxes, SandboxSnapshots and SandboxForks still use SandboxClass %q; it is deleted once none does, and no new object may use it meanwhile", inUse, cl.Name))
			return ctrl.Result{RequeueAfter: classRetryInterval}, r.patchStatus(ctx, before, cl)
		}
		controllerutil.RemoveFinalizer(cl, sandboxv1.SandboxClassFinalizer)
		if err := r.Update(ctx, cl); err != nil {
			return ctrl.Result{}, err
		}
		r.Classes.forget(cl.Name)
		return ctrl.Result{}, nil
	}
	if controllerutil.AddFinalizer(cl, sandboxv1.SandboxClassFinalizer) {
		if err := r.Update(ctx, cl); err != nil {
			return ctrl.Result{}, err
		}
		before = cl.DeepCopy()
		cl.Status.InUse, cl.Status.ObservedGeneration = inUse, cl.Generation
	}
	retry := r.verify(ctx, cl)
	return ctrl.Result{RequeueAfter: retry}, r.patchStatus(ctx, before, cl)
}

// verify sets CredentialsValid (and Ready, which follows it) from a check of
// the class's team and project with its token, when one is due: every
// classVerifyInterval, after the Secret changed, and while Vercel rejects
// the token. It returns when to look again.
func (r *SandboxClassReconciler) verify(ctx context.Context, cl *sandboxv1.SandboxClass) time.Duration {
	st := &cl.Status
	api, health, err := r.Classes.apiOf(ctx, cl)
	if err != nil {
		reason := sandboxv1.ReasonTransient
		var ce *classError
		if errors.As(err, &ce) {
			reason = ce.reason
		}
		r.setValid(cl, metav1.ConditionFalse, reason, err.Error())
		return classRetryInterval
	}
	st.TeamID, st.ProjectID = api.TeamID(), api.ProjectID()
	r.warnDeprecatedKeys(cl)
	e := r.Classes.entry(cl.Name)
	e.mu.Lock()
	due := time.Since(e.verifiedAt) >= classVerifyInterval || health.rejectedNow() ||
		!meta.IsStatusConditionTrue(st.Conditions, sandboxv1.ConditionCredentialsValid)
	e.mu.Unlock()
	if !due {
		return classVerifyInterval
	}
	vctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	err = api.VerifyProject(vctx)
	health.setProject(err)
	switch {
	case err == nil:
		e.mu.Lock()
		e.verifiedAt = time.Now()
		e.mu.Unlock()
		r.setValid(cl, metav1.ConditionTrue, sandboxv1.ReasonVerified,
			fmt.Sprintf("Vercel accepts the token and knows team %s and project %s", st.TeamID, st.ProjectID))
		return classVerifyInterval
	case vercel.IsUnauthorized(err):
		r.setValid(cl, metav1.ConditionFalse, sandboxv1.ReasonUnauthorized, classCredentialsRejected(cl, err))
	case vercel.IsProjectNotFound(err):
		r.setValid(cl, metav1.ConditionFalse, sandboxv1.ReasonProjectNotFound,
			fmt.Sprintf("Vercel does not know project %s of team %s: fix %q in Secret %s/%s", st.ProjectID, st.TeamID,
				sandboxv1.ClassSecretProjectIDKey, cl.Spec.CredentialsSecretRef.Namespace, cl.Spec.CredentialsSecretRef.Name))
	default:
		r.setValid(cl, metav1.ConditionFalse, sandboxv1.ReasonTransient, fmt.Sprintf("Could not verify the team and project: %v", err))
	}
	return classRetryInterval
}

// classCredentialsRejected is the CredentialsValid message of a rejected
// token: the status and the Secret to fix, never the token.
func classCredentialsRejected(cl *sandboxv1.SandboxClass, err error) string {
	ref := cl.Spec.CredentialsSecretRef
	return fmt.Sprintf("%s; fix %q or %q in Secret %s/%s (a new token is used without a restart)",
		credentialsRejectedBy(err), sandboxv1.ClassSecretTokenKey, sandboxv1.ClassSecretTeamIDKey, ref.Namespace, ref.Name)
}

func (r *SandboxClassReconciler) setValid(cl *sandboxv1.SandboxClass, status metav1.ConditionStatus, reason, msg string) {
	setCondition(&cl.Status.Conditions, cl.Generation, sandboxv1.ConditionCredentialsValid, status, reason, msg)
	setCondition(&cl.Status.Conditions, cl.Generation, sandboxv1.ConditionReady, status, reason, msg)
}

func (r *SandboxClassReconciler) patchStatus(ctx context.Context, before, cl *sandboxv1.SandboxClass) error {
	if apiequality.Semantic.DeepEqual(before.Status, cl.Status) {
		return nil
	}
	return r.Status().Patch(ctx, cl, client.MergeFrom(before))
}

// countUsers counts the objects of the three kinds that use the class
// (spec.className or the pinned label), read from the manager's cache.
func (r *SandboxClassReconciler) countUsers(ctx context.Context, name string) (int32, error) {
	var n int32
	count := func(o client.Object) {
		if c, ok := pinnedClass(o); ok && c == name {
			n++
		}
	}
	sbxs := &sandboxv1.SandboxList{}
	if err := r.List(ctx, sbxs); err != nil {
		return 0, err
	}
	for i := range sbxs.Items {
		count(&sbxs.Items[i])
	}
	snaps := &sandboxv1.SandboxSnapshotList{}
	if err := r.List(ctx, snaps); err != nil {
		return 0, err
	}
	for i := range snaps.Items {
		count(&snaps.Items[i])
	}
	forks := &sandboxv1.SandboxForkList{}
	if err := r.List(ctx, forks); err != nil {
		return 0, err
	}
	for i := range forks.Items {
		count(&forks.Items[i])
	}
	return n, nil
}

// classOfObject maps an object of the three kinds to its class, so that
// status.inUse follows creations and deletions, and a held class is released
// as soon as its last user is gone.
func classOfObject(_ context.Context, o client.Object) []reconcile.Request {
	if n, ok := pinnedClass(o); ok && n != "" {
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: n}}}
	}
	return nil
}

// userChanged passes the events that change a class's count of users:
// creations, deletions, and a label or spec.className that changed.
var userChanged = predicate.Funcs{
	UpdateFunc: func(e ctrlevent.UpdateEvent) bool {
		a, aok := pinnedClass(e.ObjectOld)
		b, bok := pinnedClass(e.ObjectNew)
		return a != b || aok != bok
	},
	GenericFunc: func(ctrlevent.GenericEvent) bool { return false },
}

// SetupWithManager registers the reconciler.
func (r *SandboxClassReconciler) SetupWithManager(mgr ctrl.Manager) error {
	toClass := handler.EnqueueRequestsFromMapFunc(classOfObject)
	return ctrl.NewControllerManagedBy(mgr).
		For(&sandboxv1.SandboxClass{}, builder.WithPredicates(predicate.Or(
			predicate.GenerationChangedPredicate{},
			predicate.AnnotationChangedPredicate{},
		))).
		Watches(&sandboxv1.Sandbox{}, toClass, builder.WithPredicates(userChanged)).
		Watches(&sandboxv1.SandboxSnapshot{}, toClass, builder.WithPredicates(userChanged)).
		Watches(&sandboxv1.SandboxFork{}, toClass, builder.WithPredicates(userChanged)).
		WatchesRawSource(source.Channel(r.Classes.events(), &handler.EnqueueRequestForObject{})).
		WithOptions(controllerOptions(1, 0)).
		Named("sandboxclass").
		Complete(r)
}

// warnDeprecatedKeys emits a Warning event, once per version of the class's
// Secret, when it still spells a key the deprecated way.
func (r *SandboxClassReconciler) warnDeprecatedKeys(cl *sandboxv1.SandboxClass) {
	old := r.Classes.deprecationToWarn(cl.Name)
	if len(old) == 0 || r.Recorder == nil {
		return
	}
	renames := make([]string, 0, len(old))
	for _, k := range old {
		renames = append(renames, fmt.Sprintf("%q to %q", k, newClassSecretKey[k]))
	}
	ref := cl.Spec.CredentialsSecretRef
	r.Recorder.Eventf(cl, nil, corev1.EventTypeWarning, sandboxv1.ReasonDeprecatedSecretKey, "Verify",
		"Secret %s/%s spells keys the deprecated way; rename %s (the old spelling is still read for now)", ref.Namespace, ref.Name, strings.Join(renames, " and "))
}

// newClassSecretKey maps a deprecated class Secret key to its spelling.
var newClassSecretKey = map[string]string{
	sandboxv1.ClassSecretTeamIDKeyDeprecated:    sandboxv1.ClassSecretTeamIDKey,
	sandboxv1.ClassSecretProjectIDKeyDeprecated: sandboxv1.ClassSecretProjectIDKey,
}
