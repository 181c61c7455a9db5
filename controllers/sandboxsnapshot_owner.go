package controllers

// Which Vercel snapshots and builders are a SandboxSnapshot's. Snapshots
// carry no tags, so a snapshot is the operator's only when a read shows it
// was taken of a sandbox the operator owns; a builder's name is derived, and
// matched against the pattern of this cluster's builders in the namespace.

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"regexp"

	"k8s.io/apimachinery/pkg/types"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
	"github.com/getsentry/sandbox-controller/internal/vercel"
)

// clusterShort is the cluster id as it appears in builder names: a hash, so
// that any id fits the name's character set and length.
func clusterShort(cluster string) string {
	return shortHash(cluster, 8)
}

// builderNamePattern matches the names builderName gives the builders of one
// cluster in one namespace.
func builderNamePattern(cluster, ns string) *regexp.Regexp {
	return regexp.MustCompile("^" + regexp.QuoteMeta(sanitizeName(truncateNS(ns))+"-build-"+clusterShort(cluster)+"-") + "[0-9a-f]{1,16}-[0-9a-f]+$")
}

// capturePattern matches the names vercelName gives the Vercel sandboxes of
// Sandbox name in ns, whatever their UID.
func capturePattern(ns, name string) *regexp.Regexp {
	full := sanitizeName(ns + "-" + name + "-")
	if len(full)+8 > maxVercelNameLength {
		return nil
	}
	return regexp.MustCompile("^" + regexp.QuoteMeta(full) + "[a-zA-Z0-9_-]{1,8}$")
}

// snapshotOwnership is what a read says about a Vercel snapshot a
// SandboxSnapshot names, before deleting it.
type snapshotOwnership int

const (
	// snapshotForeign: nothing proves it the operator's; it is left alone.
	snapshotForeign snapshotOwnership = iota
	// snapshotOurs: taken by this operator for this object; delete it.
	snapshotOurs
	// snapshotGone: Vercel no longer has it (404, 410, or deleted).
	snapshotGone
)

// snapshotIsOurs says whether Vercel snapshot id was taken by this operator
// for snap, so that snap may delete it. Snapshots carry no tags, so the
// proof is the Vercel sandbox it was taken of, read in Vercel:
//
//   - never for an imported snapshot (spec.source.snapshotID);
//   - a snapshot whose source session belongs to a live sandbox tagged by
//     this cluster is ours;
//   - once that sandbox is gone (builders are deleted after each build), a
//     proof recorded while it could still be read (status.snapshotProof,
//     signed by the manager for this object and this id) shows it ours;
//   - without one, the snapshot must be listed in Vercel under a name this
//     object derives: a builder of this cluster in its namespace for a
//     recipe, the Vercel sandbox of the Sandbox it captures for a capture.
//
// Names recorded in status are only candidates: each must pass the check.
func (r *SandboxSnapshotReconciler) snapshotIsOurs(ctx context.Context, snap *sandboxv1.SandboxSnapshot, id string) (snapshotOwnership, error) {
	if snap.Spec.Source.SnapshotID != nil {
		return snapshotForeign, nil
	}
	remote, err := r.api(ctx).GetSnapshot(ctx, id)
	switch {
	case vercel.IsNotFound(err) || vercel.IsGone(err):
		return snapshotGone, nil
	case err != nil:
		return snapshotForeign, fmt.Errorf("get snapshot %s: %w", id, err)
	case remote.Status == vercel.SnapshotDeleted:
		return snapshotGone, nil
	}
	known, ours, err := r.sourceSandboxOwned(ctx, snap, remote.SourceSessionID)
	switch {
	case err != nil:
		return snapshotForeign, err
	case known && ours:
		return snapshotOurs, nil
	case known:
		return snapshotForeign, nil
	case r.proofKey.valid(snap.UID, id, recordedProof(&snap.Status, id)):
		return snapshotOurs, nil
	}
	// The source sandbox is gone: a name this object derives must list it.
	return r.listedUnderDerivedName(ctx, snap, id)
}

// listedUnderDerivedName says whether Vercel lists snapshot id under a
// sandbox name snap derives (snapshotCandidates).
func (r *SandboxSnapshotReconciler) listedUnderDerivedName(ctx context.Context, snap *sandboxv1.SandboxSnapshot, id string) (snapshotOwnership, error) {
	for _, n := range snapshotCandidates(r.ClusterID, snap, id) {
		snaps, err := r.api(ctx).ListAllSnapshots(ctx, vercel.ListSnapshotsOptions{Name: n})
		if err != nil {
			return snapshotForeign, fmt.Errorf("list snapshots of %s: %w", n, err)
		}
		for _, s := range snaps {
			if s.ID == id {
				return snapshotOurs, nil
			}
		}
	}
	return snapshotForeign, nil
}

// sourceSandboxOwned reads the sandbox that session ran in. known reports
// that it still exists, ours that its tags are this cluster's.
func (r *SandboxSnapshotReconciler) sourceSandboxOwned(ctx context.Context, snap *sandboxv1.SandboxSnapshot, session string) (known, ours bool, err error) {
	if session == "" {
		return false, false, nil
	}
	sess, err := r.api(ctx).GetSession(ctx, session)
	switch {
	case err != nil && !vercel.IsNotFound(err) && !vercel.IsGone(err):
		return false, false, fmt.Errorf("get session %s: %w", session, err)
	case err != nil || sess.Session.SourceSandboxName == "":
		return false, false, nil
	}
	name := sess.Session.SourceSandboxName
	resp, err := r.api(ctx).GetSandbox(ctx, name, false)
	switch {
	case vercel.IsNotFound(err):
		return false, false, nil
	case err != nil:
		return false, false, fmt.Errorf("get sandbox %s: %w", name, err)
	}
	o := ownerOf(resp.Sandbox.Tags, r.ClusterID, snap.UID)
	return true, o == ownedBySelf || o == ownedByPeer, nil
}

// snapshotCandidates are the Vercel sandbox names, recorded in status or
// derived, under which a snapshot of snap may be listed: each once, and only
// those a name this object derives matches.
func snapshotCandidates(cluster string, snap *sandboxv1.SandboxSnapshot, id string) []string {
	var candidates []string
	var pattern *regexp.Regexp
	st, src := &snap.Status, snap.Spec.Source
	switch {
	case src.Recipe != nil:
		pattern = builderNamePattern(cluster, snap.Namespace)
		if b := st.Build; b != nil {
			candidates = append(candidates, b.BuilderName)
			if b.Replaces == id {
				candidates = append(candidates, b.ReplacesSourceVercelName)
			}
		}
		// A hash's first build runs in a builder named for it alone.
		if st.ContentHash != "" {
			candidates = append(candidates, builderName(cluster, snap.Namespace, st.ContentHash, ""))
		}
	case src.SandboxRef != nil:
		pattern = capturePattern(snap.Namespace, src.SandboxRef.Name)
		if st.Capture != nil {
			candidates = append(candidates, st.Capture.VercelName)
		}
	}
	if p := st.Provenance; p != nil {
		candidates = append(candidates, p.SourceVercelName)
	}
	var out []string
	seen := map[string]bool{}
	for _, n := range candidates {
		if n == "" || seen[n] || pattern == nil || !pattern.MatchString(n) {
			continue
		}
		seen[n] = true
		out = append(out, n)
	}
	return out
}

// proofKey signs the snapshot proofs in SandboxSnapshot status: a key derived
// from the manager's status digest key (digest_key.go), which only the
// manager holds, so a user who may write status cannot make a proof, and one
// copied from another object or for another snapshot does not verify. Nil
// (no key loaded) makes and accepts no proof.
type proofKey []byte

const proofPrefix = "hmac-sha256:"

// newProofKey derives the proof key from the digest key, so that proofs and
// the Secret digests signed with the same key can never be taken for each
// other.
func newProofKey(digestKey []byte) proofKey {
	if len(digestKey) == 0 {
		return nil
	}
	m := hmac.New(sha256.New, digestKey)
	m.Write([]byte("sandbox.sentry.io/snapshot-proof/v1"))
	return m.Sum(nil)
}

// sign is the proof that a read showed Vercel snapshot id to be taken of a
// sandbox the operator made for the object uid; "" without a key.
func (k proofKey) sign(uid types.UID, id string) string {
	if len(k) == 0 || uid == "" || id == "" {
		return ""
	}
	m := hmac.New(sha256.New, k)
	m.Write([]byte(string(uid) + "\x00" + id))
	return proofPrefix + hex.EncodeToString(m.Sum(nil))
}

// valid reports whether proof was signed for uid and id.
func (k proofKey) valid(uid types.UID, id, proof string) bool {
	want := k.sign(uid, id)
	return want != "" && hmac.Equal([]byte(want), []byte(proof))
}

// recordedProof is the proof status holds for id: the served snapshot's, or
// the replaced one's.
func recordedProof(st *sandboxv1.SandboxSnapshotStatus, id string) string {
	switch {
	case id == "":
		return ""
	case st.SnapshotID == id:
		return st.SnapshotProof
	case st.Build != nil && st.Build.Replaces == id:
		return st.Build.ReplacesProof
	}
	return ""
}

// prove records in status that id, just shown by a read to be taken of a
// sandbox the operator made for snap, is snap's: kept for the check before a
// delete, once that sandbox is gone. The caller has done the read.
func (r *SandboxSnapshotReconciler) prove(snap *sandboxv1.SandboxSnapshot, id string) {
	if snap.Status.SnapshotID == id {
		snap.Status.SnapshotProof = r.proofKey.sign(snap.UID, id)
	}
}

// proveCapture reads the Vercel sandbox the session of captured snapshot s
// ran in, and records the proof when it is the Vercel sandbox Sandbox sbx
// stands for, tagged as sbx's: for a capture recorded from an intent in
// status (after a crash or a lost answer), which no read of this reconcile
// has checked.
func (r *SandboxSnapshotReconciler) proveCapture(ctx context.Context, snap *sandboxv1.SandboxSnapshot, sbx *sandboxv1.Sandbox, s *vercel.Snapshot) error {
	if sbx == nil || len(r.proofKey) == 0 || s.SourceSessionID == "" {
		return nil
	}
	sess, err := r.api(ctx).GetSession(ctx, s.SourceSessionID)
	switch {
	case vercel.IsNotFound(err) || vercel.IsGone(err):
		return nil
	case err != nil:
		return fmt.Errorf("get session %s: %w", s.SourceSessionID, err)
	case sess.Session.SourceSandboxName != remoteName(sbx):
		return nil
	}
	resp, err := r.api(ctx).GetSandbox(ctx, sess.Session.SourceSandboxName, false)
	switch {
	case vercel.IsNotFound(err):
		return nil
	case err != nil:
		return fmt.Errorf("get sandbox %s: %w", sess.Session.SourceSandboxName, err)
	}
	if ownerOf(resp.Sandbox.Tags, r.ClusterID, sbx.UID) == ownedBySelf {
		r.prove(snap, s.ID)
	}
	return nil
}
