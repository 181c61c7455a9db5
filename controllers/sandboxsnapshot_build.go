package controllers

// What a recipe SandboxSnapshot does next, decided from its peers (the
// SandboxSnapshots of the namespace with the same content hash): serve the
// shared snapshot, follow the peer that drives the build, or drive it
// (sandboxsnapshot_builder.go), and when to rebuild.

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
	"github.com/getsentry/sandbox-controller/internal/vercel"
)

// reconcileRecipe serves the recipe's snapshot, sharing one build and one
// Vercel snapshot among the SandboxSnapshots of the namespace with the same
// content hash. It rebuilds when the snapshot expired or is older than
// maxAgeSeconds (serving the old one meanwhile), and retires the old one once
// no SandboxSnapshot uses it. decideRecipe chooses between serving,
// following and driving the build.
func (r *SandboxSnapshotReconciler) reconcileRecipe(ctx context.Context, snap *sandboxv1.SandboxSnapshot, hash string) (ctrl.Result, error) {
	st := &snap.Status
	if st.ContentHash != hash {
		// A new hash (a new base) is a new artifact; the old one is retired.
		if st.SnapshotID != "" {
			r.setReplaces(snap, st.SnapshotID)
		}
		st.ContentHash, st.SnapshotID, st.ReadyToUse, st.SizeBytes, st.CreatedAt, st.ExpiresAt = hash, "", false, 0, nil, nil
		st.SnapshotProof = ""
		if st.Usage != nil {
			st.Usage = snapshotStorage(st.Usage, "", 0, r.now())
		}
	}
	all, err := r.namespaceSnapshots(ctx, snap.Namespace)
	if err != nil {
		return ctrl.Result{}, err
	}
	peers := r.hashPeers(ctx, snap, all, hash)
	current, err := r.observeServed(ctx, snap)
	if err != nil {
		return ctrl.Result{}, err
	}
	if current, err = r.adoptNewerPeer(ctx, snap, peers, current); err != nil {
		return ctrl.Result{}, err
	}
	var age, next time.Duration
	if current != nil {
		if res, err := r.retire(ctx, snap, all); err != nil || !res.IsZero() {
			return res, err
		}
		age, next = r.now().Sub(st.CreatedAt.Time), r.nextObservation(current)
	}
	d := decideRecipe(snap, peers, current != nil, age, next)
	switch d.action {
	case recipeServe:
		// Fresh: a builder still recorded is left over from a finished build.
		if err := r.cleanupBuilder(ctx, snap); err != nil {
			return ctrl.Result{}, err
		}
		if st.Build != nil {
			st.Build.SharedWith = ""
		}
		return ctrl.Result{RequeueAfter: d.requeue}, nil
	case recipeFollow:
		return r.follow(snap, d.driver, current != nil), nil
	}
	return r.drive(ctx, snap, peers, hash, st.SnapshotID, current != nil)
}

// hashPeers are the other recipes of the namespace with the content hash, in
// the same class. The hash is computed from each peer's spec, not read from
// its status, so a peer created a moment ago counts before its first
// reconcile.
func (r *SandboxSnapshotReconciler) hashPeers(ctx context.Context, snap *sandboxv1.SandboxSnapshot, all []sandboxv1.SandboxSnapshot, hash string) []*sandboxv1.SandboxSnapshot {
	var peers []*sandboxv1.SandboxSnapshot
	for i := range all {
		o := &all[i]
		if o.UID == snap.UID || o.Spec.Source.Recipe == nil {
			continue
		}
		if h, _ := r.contentHash(ctx, o); h == hash && r.sameClass(ctx, o) {
			peers = append(peers, o)
		}
	}
	return peers
}

// observeServed reads the snapshot this object serves: Ready while Vercel
// serves it (returned), Expired once not.
func (r *SandboxSnapshotReconciler) observeServed(ctx context.Context, snap *sandboxv1.SandboxSnapshot) (*vercel.Snapshot, error) {
	id := snap.Status.SnapshotID
	if id == "" {
		return nil, nil
	}
	remote, err := r.api(ctx).GetSnapshot(ctx, id)
	state, err := classifyServed(remote, err, r.now())
	switch {
	case err != nil:
		return nil, fmt.Errorf("get snapshot %s: %w", id, err)
	case state != servedCreated:
		r.markExpired(snap, id)
		return nil, nil
	}
	r.markReady(snap, remote)
	return remote, nil
}

// adoptNewerPeer serves a newer snapshot of the same hash built for another
// user (peerToAdopt), when Vercel still serves it, and returns what is
// served.
func (r *SandboxSnapshotReconciler) adoptNewerPeer(ctx context.Context, snap *sandboxv1.SandboxSnapshot, peers []*sandboxv1.SandboxSnapshot, current *vercel.Snapshot) (*vercel.Snapshot, error) {
	st := &snap.Status
	p := peerToAdopt(st, peers, current != nil)
	if p == nil {
		return current, nil
	}
	remote, err := r.api(ctx).GetSnapshot(ctx, p.Status.SnapshotID)
	state, err := classifyServed(remote, err, r.now())
	switch {
	case err != nil:
		return nil, fmt.Errorf("get snapshot %s: %w", p.Status.SnapshotID, err)
	case state != servedCreated:
		return current, nil
	}
	if st.SnapshotID != "" {
		r.setReplaces(snap, st.SnapshotID)
	}
	r.Recorder.Eventf(snap, nil, corev1.EventTypeNormal, "Shared", "Observe",
		"Uses Vercel snapshot %s built for SandboxSnapshot %s (same content hash)", remote.ID, p.Name)
	st.SnapshotID, st.SnapshotProof = remote.ID, ""
	// Its provenance is the builder's that made it, and its proof when the
	// peer's verifies (signed for the peer and this snapshot), for the check
	// before the last user deletes it.
	st.Provenance = p.Status.Provenance.DeepCopy()
	if r.proofKey.valid(p.UID, remote.ID, p.Status.SnapshotProof) {
		r.prove(snap, remote.ID)
	}
	r.markReady(snap, remote)
	return remote, nil
}

func (r *SandboxSnapshotReconciler) setReplaces(snap *sandboxv1.SandboxSnapshot, id string) {
	if snap.Status.Build == nil {
		snap.Status.Build = &sandboxv1.SnapshotBuildStatus{}
	}
	b := snap.Status.Build
	b.Replaces, b.ReplacesSourceVercelName, b.ReplacesProof = id, replacedSource(snap, id), recordedProof(&snap.Status, id)
}

// replacedSource is the builder the served snapshot id was taken of, as its
// provenance says, for the ownership check before it is retired.
func replacedSource(snap *sandboxv1.SandboxSnapshot, id string) string {
	if p := snap.Status.Provenance; p != nil && snap.Status.SnapshotID == id {
		return p.SourceVercelName
	}
	return ""
}

// vercelDefaultSnapshotExpiration is how long Vercel keeps a snapshot after
// its last use when the capture names no expiration (the v2 route).
const vercelDefaultSnapshotExpiration = 30 * 24 * time.Hour

// sharedExpiration is the expiration of a build's snapshot: the longest any
// user of the hash asks for (0, never, beats all; unset counts as Vercel's
// default), so no user loses the shared snapshot sooner than its own spec
// says. Nil when no user sets one, leaving Vercel's default.
func sharedExpiration(snap *sandboxv1.SandboxSnapshot, peers []*sandboxv1.SandboxSnapshot) *time.Duration {
	var longest time.Duration
	set, unset := false, false
	for _, o := range append([]*sandboxv1.SandboxSnapshot{snap}, peers...) {
		d := snapshotExpiration(o)
		switch {
		case d == nil:
			unset = true
			continue
		case *d == 0:
			return d
		}
		set, longest = true, max(longest, *d)
	}
	if !set {
		return nil
	}
	if unset {
		longest = max(longest, vercelDefaultSnapshotExpiration)
	}
	return &longest
}

// effectiveMaxAge is the smallest maxAgeSeconds among the users of a shared
// build, so each user's limit is honoured.
func effectiveMaxAge(snap *sandboxv1.SandboxSnapshot, peers []*sandboxv1.SandboxSnapshot) time.Duration {
	var m int64
	for _, o := range append([]*sandboxv1.SandboxSnapshot{snap}, peers...) {
		if v := o.Spec.MaxAgeSeconds; v != nil && *v > 0 && (m == 0 || *v < m) {
			m = *v
		}
	}
	return time.Duration(m) * time.Second
}

func newestReadyPeer(peers []*sandboxv1.SandboxSnapshot) *sandboxv1.SandboxSnapshot {
	var best *sandboxv1.SandboxSnapshot
	for _, p := range peers {
		if !p.Status.ReadyToUse || p.Status.SnapshotID == "" || p.Status.CreatedAt == nil {
			continue
		}
		if best == nil || p.Status.CreatedAt.After(best.Status.CreatedAt.Time) {
			best = p
		}
	}
	return best
}

// buildDriver returns the SandboxSnapshot that runs the shared build when it
// is not snap: the oldest user of the hash that is not being deleted. Only it
// calls Vercel for the build, so one build per hash runs at a time.
func buildDriver(snap *sandboxv1.SandboxSnapshot, peers []*sandboxv1.SandboxSnapshot) *sandboxv1.SandboxSnapshot {
	for _, p := range peers {
		if p.DeletionTimestamp.IsZero() && olderFirst(p, snap) {
			return p
		}
	}
	return nil
}

// liveOwner returns the peer with the uid when it exists and is not being
// deleted; a builder whose owner is gone is taken over.
func liveOwner(uid string, peers []*sandboxv1.SandboxSnapshot) *sandboxv1.SandboxSnapshot {
	for _, p := range peers {
		if string(p.UID) == uid && p.DeletionTimestamp.IsZero() {
			return p
		}
	}
	return nil
}

// follow reports the build another SandboxSnapshot runs for this one.
func (r *SandboxSnapshotReconciler) follow(snap, driver *sandboxv1.SandboxSnapshot, serving bool) ctrl.Result {
	st := &snap.Status
	if st.Build == nil {
		st.Build = &sandboxv1.SnapshotBuildStatus{}
	}
	st.Build.SharedWith = driver.Name
	if db := driver.Status.Build; db != nil {
		st.Build.Step, st.Build.CompletedSteps, st.Build.TotalSteps = db.Step, db.CompletedSteps, db.TotalSteps
	}
	rd := followReadiness(driver, serving, st.SnapshotID)
	setSnapshotReady(snap, rd)
	if rd.phase == sandboxv1.SnapshotFailed {
		return ctrl.Result{}
	}
	return ctrl.Result{RequeueAfter: snapshotWaitPoll}
}
