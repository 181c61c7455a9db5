package controllers

// Which Vercel snapshots and builders are a SandboxSnapshot's. Snapshots
// carry no tags, so a snapshot is the operator's only when a read shows it
// was taken of a sandbox the operator owns; a builder's name is derived, and
// matched against the pattern of this cluster's builders in the namespace.

import (
	"context"
	"fmt"
	"regexp"

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

// snapshotIsOurs reports whether Vercel snapshot id was taken by this
// operator for snap, so that snap may delete it. Snapshots carry no tags, so
// the proof is the Vercel sandbox it was taken of, read in Vercel:
//
//   - never for an imported snapshot (spec.source.snapshotID);
//   - a snapshot whose source session belongs to a live sandbox tagged by
//     this cluster is ours;
//   - once that sandbox is gone (builders are deleted after each build), the
//     snapshot must be listed in Vercel under a name this object derives:
//     a builder of this cluster in its namespace for a recipe, the Vercel
//     sandbox of the Sandbox it captures for a capture.
//
// Names recorded in status are only candidates: each must pass the check.
// A snapshot that Vercel no longer has counts as ours (nothing to delete).
func (r *SandboxSnapshotReconciler) snapshotIsOurs(ctx context.Context, snap *sandboxv1.SandboxSnapshot, id string) (bool, error) {
	if snap.Spec.Source.SnapshotID != nil {
		return false, nil
	}
	remote, err := r.api(ctx).GetSnapshot(ctx, id)
	switch {
	case vercel.IsNotFound(err) || vercel.IsGone(err):
		return true, nil
	case err != nil:
		return false, fmt.Errorf("get snapshot %s: %w", id, err)
	}
	if known, ours, err := r.sourceSandboxOwned(ctx, snap, remote.SourceSessionID); known || err != nil {
		return ours, err
	}
	// The source sandbox is gone: a name this object derives must list it.
	for _, n := range snapshotCandidates(r.ClusterID, snap, id) {
		snaps, err := r.api(ctx).ListAllSnapshots(ctx, vercel.ListSnapshotsOptions{Name: n})
		if err != nil {
			return false, fmt.Errorf("list snapshots of %s: %w", n, err)
		}
		for _, s := range snaps {
			if s.ID == id {
				return true, nil
			}
		}
	}
	return false, nil
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
