package controllers

import (
	"context"
	"fmt"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
	"github.com/getsentry/sandbox-controller/internal/recipe"
	"github.com/getsentry/sandbox-controller/internal/vercel"
)

// Poll delays of the SandboxSnapshot controller.
const (
	snapshotWaitPoll  = 5 * time.Second
	snapshotBuildPoll = 2 * time.Second
)

// SandboxSnapshotReconciler makes each SandboxSnapshot one Vercel snapshot:
// captured from a Sandbox, imported by id, or built from a recipe.
type SandboxSnapshotReconciler struct {
	client.Client
	// APIReader reads Secrets (clone credentials) uncached.
	APIReader client.Reader
	Vercel    SandboxAPI
	// Classes, when set, gives each object its SandboxClass's Vercel client
	// (Vercel is the client of objects of no class).
	Classes  *ClassClients
	Recorder events.EventRecorder
	// Quota, when set, refuses new snapshots once a SandboxQuota's
	// snapshotBytes is used up (sandboxsnapshot_quota.go).
	Quota *QuotaLedger
	// Notifier, when set, announces Ready and Failed transitions to
	// the namespace's webhook.
	Notifier Notifier
	// PollInterval is how often a ready snapshot is observed for expiry.
	PollInterval time.Duration
	// MaxConcurrentReconciles bounds parallel reconciles (default 1).
	MaxConcurrentReconciles int
	// BackoffCap caps the retry delay after errors (default one minute).
	BackoffCap time.Duration
	// ReferenceDeadline is how long a baseSnapshotRef that is missing,
	// Failed or part of a cycle is waited for before the object is Failed
	// (default DefaultReferenceDeadline).
	ReferenceDeadline time.Duration
	// Now is the clock (tests); time.Now when nil.
	Now func() time.Time
	// ClusterID names this cluster in the owner tags and builder names
	// (the manager's --cluster-id).
	ClusterID string
	// Shard is the part of the cluster this manager reconciles; the zero
	// value is all of it.
	Shard Shard
	// DigestKey is the manager's status digest key (digest_key.go), from
	// which the key of status.snapshotProof is derived; when unset it is
	// loaded from the Secret DigestKeySecret names.
	DigestKey       []byte
	DigestKeySecret DigestKeySecret

	// sentSecrets remembers the clone credentials sent to Vercel, to scrub
	// them from a step's output after a rotation.
	sentSecrets sentSecrets
	// proofKey signs and checks status.snapshotProof.
	proofKey proofKey
}

// +kubebuilder:rbac:groups=sandbox.sentry.io,resources=sandboxsnapshots,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=sandbox.sentry.io,resources=sandboxsnapshots/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=sandbox.sentry.io,resources=sandboxsnapshots/finalizers,verbs=update
// +kubebuilder:rbac:groups=sandbox.sentry.io,resources=sandboxes,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Reconcile observes the Vercel snapshot of one SandboxSnapshot (or the
// capture or build that makes it), acts at most once, and records what it
// saw in status.
func (r *SandboxSnapshotReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	return skeleton[*sandboxv1.SandboxSnapshot]{
		classes:   r.Classes,
		client:    r.Client,
		recorder:  r.Recorder,
		notifier:  r.Notifier,
		finalizer: sandboxv1.SandboxSnapshotFinalizer,
		pausable:  true,
		labels:    r.hashLabel,
		finalize:  r.finalize,
		reconcile: r.reconcileSnapshot,
	}.run(ctx, req.NamespacedName, &sandboxv1.SandboxSnapshot{})
}

func (r *SandboxSnapshotReconciler) reconcileSnapshot(ctx context.Context, snap *sandboxv1.SandboxSnapshot) (ctrl.Result, error) {
	var res ctrl.Result
	var err error
	switch src := snap.Spec.Source; {
	case src.SnapshotID != nil:
		res, err = r.observe(ctx, snap, *src.SnapshotID)
	case src.SandboxRef != nil:
		res, err = r.reconcileCapture(ctx, snap)
	case src.Recipe != nil:
		// The content hash needs the base's own hash, so a recipe layered on
		// a snapshot that is not ready yet has none.
		if hash, baseWait := r.contentHash(ctx, snap); baseWait != "" {
			res, err = r.waitForBase(ctx, snap, baseWait)
		} else {
			res, err = r.reconcileRecipe(ctx, snap, hash)
		}
	}
	if err == nil {
		snap.Status.ObservedGeneration = snap.Generation
	}
	return res, err
}

// hashLabel sets, on recipes, the content-hash label that lets every user of
// a shared build find the others (and survives restarts). It reports whether
// the label changed.
func (r *SandboxSnapshotReconciler) hashLabel(ctx context.Context, snap *sandboxv1.SandboxSnapshot) bool {
	hash, _ := r.contentHash(ctx, snap)
	if hash == "" || snap.Labels[sandboxv1.LabelContentHash] == recipe.Short(hash) {
		return false
	}
	if snap.Labels == nil {
		snap.Labels = map[string]string{}
	}
	snap.Labels[sandboxv1.LabelContentHash] = recipe.Short(hash)
	return true
}

// patchStatusNow writes status in the middle of a reconcile: an intent
// (capture requested, builder named, build captured) must be durable before
// Vercel is asked, so a restart or a delete finds it instead of asking twice
// or leaking what Vercel made. Only the mutation is sent; the rest of the
// status as this reconcile has it so far is kept in memory (the answer holds
// the stored status, without those changes) for the reconcile's own write.
func (r *SandboxSnapshotReconciler) patchStatusNow(ctx context.Context, snap *sandboxv1.SandboxSnapshot, mutate func(st *sandboxv1.SandboxSnapshotStatus)) error {
	before := snap.DeepCopy()
	mutate(&snap.Status)
	if apiequality.Semantic.DeepEqual(before.Status, snap.Status) {
		return nil
	}
	want := snap.Status.DeepCopy()
	err := r.Status().Patch(ctx, snap, client.MergeFrom(before))
	snap.Status = *want
	return err
}

// observe reads the Vercel snapshot id and reports it: Ready with size and
// expiry while it exists, Expired once Vercel expired or deleted it.
func (r *SandboxSnapshotReconciler) observe(ctx context.Context, snap *sandboxv1.SandboxSnapshot, id string) (ctrl.Result, error) {
	remote, err := r.api(ctx).GetSnapshot(ctx, id)
	state, err := classifyServed(remote, err, r.now())
	switch {
	case err != nil:
		return ctrl.Result{}, fmt.Errorf("get snapshot %s: %w", id, err)
	case state == servedGone || state == servedExpired:
		r.markExpired(snap, id)
		return ctrl.Result{}, nil
	case state == servedFailed:
		snap.Status.SnapshotID = id
		setSnapshotReady(snap, snapFailed(sandboxv1.ReasonCaptureFailed, fmt.Sprintf("Vercel reports snapshot %s as failed", id)))
		return ctrl.Result{}, nil
	}
	r.markReady(snap, remote)
	return ctrl.Result{RequeueAfter: r.nextObservation(remote)}, nil
}

// nextObservation polls at the usual interval, or right after the snapshot
// expires, whichever comes first.
func (r *SandboxSnapshotReconciler) nextObservation(s *vercel.Snapshot) time.Duration {
	d := r.pollInterval()
	if s.ExpiresAt > 0 {
		if until := time.Until(time.UnixMilli(s.ExpiresAt)) + time.Second; until < d {
			d = max(until, time.Second)
		}
	}
	return d
}

func (r *SandboxSnapshotReconciler) markReady(snap *sandboxv1.SandboxSnapshot, remote *vercel.Snapshot) {
	st := &snap.Status
	wasReady := st.ReadyToUse && st.SnapshotID == remote.ID
	st.SnapshotID = remote.ID
	st.SizeBytes = remote.SizeBytes
	st.Usage = snapshotStorage(st.Usage, remote.ID, remote.SizeBytes, r.now())
	st.CreatedAt = msTime(remote.CreatedAt)
	st.ExpiresAt = msTime(remote.ExpiresAt)
	st.Provenance = provenance(snap, remote)
	setSnapshotReady(snap, snapReadiness{sandboxv1.SnapshotReady, metav1.ConditionTrue, sandboxv1.ReasonSnapshotReady,
		fmt.Sprintf("Vercel snapshot %s is ready to use", remote.ID)})
	if !wasReady {
		r.Recorder.Eventf(snap, nil, corev1.EventTypeNormal, "Ready", "Observe", "Vercel snapshot %s (%d bytes) is ready to use", remote.ID, remote.SizeBytes)
	}
}

// provenance says who made the snapshot remote and from which session; a
// sandbox name recorded before is kept when status no longer holds it.
func provenance(snap *sandboxv1.SandboxSnapshot, remote *vercel.Snapshot) *sandboxv1.SnapshotProvenance {
	st := &snap.Status
	p := &sandboxv1.SnapshotProvenance{Origin: sandboxv1.SnapshotImported, SourceSessionID: remote.SourceSessionID}
	switch src := snap.Spec.Source; {
	case src.SandboxRef != nil:
		p.Origin = sandboxv1.SnapshotCaptured
		if st.Capture != nil {
			p.SourceVercelName = st.Capture.VercelName
		}
	case src.Recipe != nil:
		p.Origin = sandboxv1.SnapshotBuilt
		if st.Build != nil {
			p.SourceVercelName = st.Build.BuilderName
		}
	}
	if old := st.Provenance; p.SourceVercelName == "" && old != nil && old.SourceSessionID == p.SourceSessionID {
		p.SourceVercelName = old.SourceVercelName
	}
	return p
}

func (r *SandboxSnapshotReconciler) markExpired(snap *sandboxv1.SandboxSnapshot, id string) {
	st := &snap.Status
	if st.Phase != sandboxv1.SnapshotExpired {
		r.Recorder.Eventf(snap, nil, corev1.EventTypeWarning, sandboxv1.ReasonExpired, "Observe",
			"Vercel snapshot %s expired or was deleted outside the operator", id)
	}
	st.SnapshotID = id
	st.ExpiresAt = nil
	setSnapshotReady(snap, snapReadiness{sandboxv1.SnapshotExpired, metav1.ConditionFalse, sandboxv1.ReasonExpired,
		fmt.Sprintf("Vercel snapshot %s expired or was deleted; sandboxes can no longer boot from it", id)})
}

func (r *SandboxSnapshotReconciler) namespaceSnapshots(ctx context.Context, ns string) ([]sandboxv1.SandboxSnapshot, error) {
	list := &sandboxv1.SandboxSnapshotList{}
	if err := r.List(ctx, list, client.InNamespace(ns)); err != nil {
		return nil, fmt.Errorf("list SandboxSnapshots: %w", err)
	}
	sort.Slice(list.Items, func(i, j int) bool { return olderFirst(&list.Items[i], &list.Items[j]) })
	return list.Items, nil
}

// olderFirst orders objects by creation, then name: the first is the one
// that drives a shared build.
func olderFirst(a, b *sandboxv1.SandboxSnapshot) bool {
	if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
		return a.CreationTimestamp.Before(&b.CreationTimestamp)
	}
	return a.Name < b.Name
}

// snapshotExpiration is spec.expirationSeconds for CreateSnapshot: nil keeps
// Vercel's default, 0 never expires.
func snapshotExpiration(snap *sandboxv1.SandboxSnapshot) *time.Duration {
	if snap.Spec.ExpirationSeconds == nil {
		return nil
	}
	d := time.Duration(*snap.Spec.ExpirationSeconds) * time.Second
	return &d
}

func (r *SandboxSnapshotReconciler) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

func (r *SandboxSnapshotReconciler) pollInterval() time.Duration {
	if r.PollInterval <= 0 {
		return time.Minute
	}
	return r.PollInterval
}

// SetupWithManager registers the reconciler. Besides its own objects'
// spec, label and annotation changes, it is woken by: other SandboxSnapshots
// sharing a content hash (a shared build finishing or its driver going away),
// a base snapshot changing (its layers wait for it), and a Sandbox changing
// (a capture waits for it to run).
func (r *SandboxSnapshotReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if err := indexSnapshots(context.Background(), mgr); err != nil {
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
	r.proofKey = newProofKey(r.DigestKey)
	return ctrl.NewControllerManagedBy(mgr).
		For(&sandboxv1.SandboxSnapshot{}, builder.WithPredicates(r.Shard.predicate(), predicate.Or(
			predicate.GenerationChangedPredicate{},
			predicate.LabelChangedPredicate{},
			predicate.AnnotationChangedPredicate{},
		))).
		Watches(&sandboxv1.SandboxSnapshot{}, handler.EnqueueRequestsFromMapFunc(r.relatedSnapshots)).
		Watches(&sandboxv1.Sandbox{}, handler.EnqueueRequestsFromMapFunc(r.capturesOf)).
		Watches(&sandboxv1.SandboxQuota{}, handler.EnqueueRequestsFromMapFunc(r.quotaWaiters)).
		WithOptions(controllerOptions(r.MaxConcurrentReconciles, r.BackoffCap)).
		Named("sandboxsnapshot").
		Complete(r.Shard.guard(r))
}

// relatedSnapshots maps a SandboxSnapshot to the others that depend on it:
// those with the same content-hash label, and recipes layered on it.
func (r *SandboxSnapshotReconciler) relatedSnapshots(ctx context.Context, obj client.Object) []reconcile.Request {
	keys := []string{"base:" + obj.GetName()}
	if label := obj.GetLabels()[sandboxv1.LabelContentHash]; label != "" {
		keys = append(keys, "hash:"+label)
	}
	var related []sandboxv1.SandboxSnapshot
	for _, k := range keys {
		list := &sandboxv1.SandboxSnapshotList{}
		if err := r.List(ctx, list, client.InNamespace(obj.GetNamespace()), client.MatchingFields{indexDependsOn: k}); err != nil {
			return nil
		}
		related = append(related, list.Items...)
	}
	return requestsFor(related, func(o *sandboxv1.SandboxSnapshot) bool { return o.Name != obj.GetName() })
}

// capturesOf maps a Sandbox to the SandboxSnapshots waiting to capture it.
// One whose capture is under way (intent recorded) or done needs no Sandbox
// event: the capture annotates the Sandbox before its own result is written,
// so waking it then would run it again from a stale cached copy.
func (r *SandboxSnapshotReconciler) capturesOf(ctx context.Context, obj client.Object) []reconcile.Request {
	list := &sandboxv1.SandboxSnapshotList{}
	if err := r.List(ctx, list, client.InNamespace(obj.GetNamespace()), client.MatchingFields{indexSandboxRef: obj.GetName()}); err != nil {
		return nil
	}
	return requestsFor(list.Items, func(o *sandboxv1.SandboxSnapshot) bool {
		return o.Status.SnapshotID == "" && o.Status.Capture == nil
	})
}

// findSandbox reads a Sandbox of the namespace; nil when it does not exist.
func findSandbox(ctx context.Context, c client.Reader, ns, name string) (*sandboxv1.Sandbox, error) {
	sbx := &sandboxv1.Sandbox{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, sbx); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, err
	}
	return sbx, nil
}
