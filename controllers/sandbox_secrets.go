package controllers

// Secret rotation: a Sandbox records, per referenced Secret, the
// resourceVersion and a keyed digest of the values Vercel was given
// (status.secrets; digest_key.go holds the key). The manager watches Secrets' metadata only — never their
// values — so a changed resourceVersion wakes the Sandboxes that reference
// the Secret; they read it again (uncached) and, when the digest changed,
// apply it: injected headers and forward URLs reach the running session at once (Vercel
// updates a session's network policy), env values and git credentials the
// next session or creation (Vercel cannot change a running session's
// environment). docs/sandbox.md, "Secret rotation".

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
	"github.com/getsentry/sandbox-controller/internal/vercel"
)

// secretUse is how a spec uses a Secret; one Secret may serve several uses.
type secretUse uint8

const (
	useHeaders secretUse = 1 << iota // spec.networkPolicy.injectHeaders, allow[].rules[].transform
	useEnv                           // spec.env valueFrom
	useGit                           // spec.source.git.credentials
	useForward                       // spec.networkPolicy.allow[].rules[].forwardURL
)

// secretUses maps each Secret the spec references to its uses.
func secretUses(spec *sandboxv1.SandboxSpec) map[string]secretUse {
	uses := map[string]secretUse{}
	for _, e := range spec.Env {
		if e.ValueFrom != nil {
			uses[e.ValueFrom.SecretKeyRef.Name] |= useEnv
		}
	}
	for _, ps := range policySecrets(spec.NetworkPolicy) {
		uses[ps.name] |= ps.use
	}
	if g := spec.Source.Git; g != nil && g.Credentials != nil {
		uses[g.Credentials.SecretName] |= useGit
	}
	return uses
}

// referencedSecrets is the sorted names of the Secrets the spec references.
func referencedSecrets(spec *sandboxv1.SandboxSpec) []string {
	uses := secretUses(spec)
	names := make([]string, 0, len(uses))
	for n := range uses {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// readGitCredentials reads the git credentials of spec.source, if any, so
// they are digested with the rest.
func readGitCredentials(ctx context.Context, secrets *secretReader, src *sandboxv1.SandboxSource) error {
	if src.Git == nil || src.Git.Credentials == nil {
		return nil
	}
	_, _, err := secrets.gitCredentials(ctx, src.Git.Credentials.SecretName)
	return err
}

// digestPrefix marks a keyed digest in status. A digest without it was
// written by a version that hashed the values without a key; it is only
// compared against, never written again (legacyDigest).
const digestPrefix = "hmac-sha256:"

// secretDigest identifies the values of the keys read from one Secret: an
// HMAC under the manager's digest key (digest_key.go), so that whoever reads
// the Sandbox cannot confirm a guessed value by hashing it. It also covers
// the object's UID, so equal values in two Sandboxes do not show as equal
// digests, and is truncated: it tells versions apart, nothing more.
func secretDigest(key []byte, uid types.UID, name string, sec *corev1.Secret, keys map[string]bool) string {
	h := hmac.New(sha256.New, key)
	writeDigested(h, uid, name, sec, keys)
	return digestPrefix + hex.EncodeToString(h.Sum(nil))[:16]
}

// legacyDigest is the unkeyed digest earlier versions recorded. It is
// computed only to compare with such a recorded digest, so that an upgrade
// does not take every Secret for rotated.
func legacyDigest(uid types.UID, name string, sec *corev1.Secret, keys map[string]bool) string {
	h := sha256.New()
	writeDigested(h, uid, name, sec, keys)
	return hex.EncodeToString(h.Sum(nil))[:16]
}

func writeDigested(h hash.Hash, uid types.UID, name string, sec *corev1.Secret, keys map[string]bool) {
	sorted := make([]string, 0, len(keys))
	for k := range keys {
		sorted = append(sorted, k)
	}
	sort.Strings(sorted)
	fmt.Fprintf(h, "%s\x00%s\x00", uid, name)
	for _, k := range sorted {
		fmt.Fprintf(h, "%s\x00%d\x00", k, len(sec.Data[k]))
		h.Write(sec.Data[k])
	}
}

// isLegacyDigest reports whether a recorded digest is of the unkeyed form.
func isLegacyDigest(d string) bool { return d != "" && !strings.HasPrefix(d, digestPrefix) }

// sameValues reports whether recorded, a digest in status, stands for the
// values of sec's keys: by the form it was written in.
func sameValues(recorded string, key []byte, uid types.UID, name string, sec *corev1.Secret, keys map[string]bool) bool {
	if isLegacyDigest(recorded) {
		return hmac.Equal([]byte(recorded), []byte(legacyDigest(uid, name, sec, keys)))
	}
	return hmac.Equal([]byte(recorded), []byte(secretDigest(key, uid, name, sec, keys)))
}

// appliedSecrets lists the Secrets secrets read, as status records them.
func appliedSecrets(key []byte, uid types.UID, secrets *secretReader) []sandboxv1.AppliedSecret {
	out := make([]sandboxv1.AppliedSecret, 0, len(secrets.keys))
	for name, keys := range secrets.keys {
		sec := secrets.cache[name]
		out = append(out, sandboxv1.AppliedSecret{Name: name, ResourceVersion: sec.ResourceVersion, Digest: secretDigest(key, uid, name, sec, keys)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// recordSecrets records what Vercel was just given from secrets: all of the
// spec's Secret values after a create or an update.
func (r *SandboxReconciler) recordSecrets(sbx *sandboxv1.Sandbox, secrets *secretReader) {
	st := &sbx.Status
	if len(referencedSecrets(&sbx.Spec)) == 0 {
		st.Secrets = nil
		meta.RemoveStatusCondition(&st.Conditions, sandboxv1.ConditionSecretsCurrent)
		return
	}
	if st.Secrets == nil {
		st.Secrets = &sandboxv1.SecretsStatus{}
	}
	st.Secrets.Applied = appliedSecrets(r.DigestKey, sbx.UID, secrets)
	markSecrets(sbx, nil)
}

// markSecrets sets SecretsCurrent from status and problem, the error of the
// last read of the Secrets, if any.
func markSecrets(sbx *sandboxv1.Sandbox, problem *secretError) {
	st := &sbx.Status
	if st.Secrets == nil {
		return
	}
	switch {
	case problem != nil:
		setCondition(&st.Conditions, sbx.Generation, sandboxv1.ConditionSecretsCurrent, metav1.ConditionFalse, classify(problem).reason,
			problem.Error()+"; the Vercel sandbox keeps the values it was given")
	case st.Secrets.StaleSession != "" && st.Secrets.StaleSession == st.SessionID && st.ExpiresAt != nil:
		setCondition(&st.Conditions, sbx.Generation, sandboxv1.ConditionSecretsCurrent, metav1.ConditionFalse, sandboxv1.ReasonSecretRotated,
			fmt.Sprintf("Session %s keeps the env values of a rotated Secret until it stops; the next session gets the current ones", st.SessionID))
	default:
		st.Secrets.StaleSession = ""
		setCondition(&st.Conditions, sbx.Generation, sandboxv1.ConditionSecretsCurrent, metav1.ConditionTrue, sandboxv1.ReasonSecretsCurrent,
			"Vercel has the current values of the referenced Secrets")
	}
}

// settleSecrets clears the stale-session mark once that session no longer
// runs (it stopped, or another one runs): the next session starts with the
// env Vercel holds, which the rotation updated. Called at the end of every
// reconcile, on the status it is about to write.
func settleSecrets(sbx *sandboxv1.Sandbox) {
	st := &sbx.Status
	if s := st.Secrets; s != nil && s.StaleSession != "" && (s.StaleSession != st.SessionID || st.ExpiresAt == nil) &&
		hasCondition(st.Conditions, sandboxv1.ConditionSecretsCurrent, sandboxv1.ReasonSecretRotated) {
		markSecrets(sbx, nil)
	}
}

// secretVersions is the resourceVersion of each named Secret in the
// manager's metadata cache; "" for one that does not exist.
func (r *SandboxReconciler) secretVersions(ctx context.Context, namespace string, names []string) (map[string]string, error) {
	out := make(map[string]string, len(names))
	for _, name := range names {
		m := &metav1.PartialObjectMetadata{}
		m.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
		err := r.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, m)
		switch {
		case apierrors.IsNotFound(err):
			out[name] = ""
		case err != nil:
			return nil, fmt.Errorf("get metadata of Secret %s: %w", name, err)
		default:
			out[name] = m.ResourceVersion
		}
	}
	return out, nil
}

// refreshSecrets applies rotated Secret values to a Sandbox whose spec
// Vercel already has. It reads Secret values only when a referenced Secret's
// resourceVersion differs from the one recorded. A Secret that cannot be
// read is reported on SecretsCurrent and leaves the Vercel sandbox as it is;
// the rest of the reconcile goes on, so an unreadable Secret never stops a
// session from idling or stopping.
func (r *SandboxReconciler) refreshSecrets(ctx context.Context, sbx *sandboxv1.Sandbox) error {
	st := &sbx.Status
	names := referencedSecrets(&sbx.Spec)
	if len(names) == 0 {
		if st.Secrets != nil {
			st.Secrets = nil
			meta.RemoveStatusCondition(&st.Conditions, sandboxv1.ConditionSecretsCurrent)
		}
		return nil
	}
	if !refreshable(sbx) {
		return nil
	}
	recorded, changed, err := r.secretsChanged(ctx, sbx, names)
	if err != nil || !changed {
		return err
	}
	secrets, err := r.readSecretValues(ctx, sbx)
	if secrets == nil || err != nil {
		return err
	}
	applied := appliedSecrets(r.DigestKey, sbx.UID, secrets)
	if st.Secrets == nil {
		// Recorded by a version without rotation, or adopted: what Vercel
		// holds is unknown; the values read now are the baseline.
		st.Secrets = &sandboxv1.SecretsStatus{Applied: applied}
		markSecrets(sbx, nil)
		return nil
	}
	rotated := rotatedSecrets(r.DigestKey, sbx.UID, recorded, applied, secrets)
	if len(rotated) == 0 {
		// Metadata changed, or keys the spec does not read.
		st.Secrets.Applied = applied
		markSecrets(sbx, nil)
		return nil
	}
	return r.applyRotation(ctx, sbx, secrets, applied, rotated)
}

// refreshable reports whether Vercel holds the values of sbx's current spec,
// which a rotation may then refresh.
func refreshable(sbx *sandboxv1.Sandbox) bool {
	st := &sbx.Status
	// Not created yet, or a spec change is about to be applied (with the
	// current values): nothing to refresh.
	return st.VercelName != "" && st.SessionID != "" && st.ObservedGeneration == sbx.Generation && st.Phase != sandboxv1.SandboxDeleting
}

// secretsChanged reports whether a referenced Secret may have changed since
// status recorded it, from the resourceVersions in the manager's metadata
// cache, and what status recorded, by name.
func (r *SandboxReconciler) secretsChanged(ctx context.Context, sbx *sandboxv1.Sandbox, names []string) (map[string]sandboxv1.AppliedSecret, bool, error) {
	versions, err := r.secretVersions(ctx, sbx.Namespace, names)
	if err != nil {
		return nil, false, err
	}
	recorded := recordedSecrets(&sbx.Status)
	changed := false
	for _, n := range names {
		// A digest of the unkeyed form is replaced by a keyed one the
		// first time an upgraded manager sees it: that reads the Secret.
		if versions[n] != recorded[n].ResourceVersion || isLegacyDigest(recorded[n].Digest) {
			changed = true
		}
	}
	return recorded, changed, nil
}

// readSecretValues reads the values of the Secrets the spec references. One
// that cannot be read is reported on SecretsCurrent (with an event when the
// reason is new) and answers nil: the Vercel sandbox keeps the values it was
// given.
func (r *SandboxReconciler) readSecretValues(ctx context.Context, sbx *sandboxv1.Sandbox) (*secretReader, error) {
	st := &sbx.Status
	secrets := &secretReader{reader: r.APIReader, namespace: sbx.Namespace}
	_, err := buildConfig(ctx, secrets, &sbx.Spec)
	if err == nil {
		err = readGitCredentials(ctx, secrets, &sbx.Spec.Source)
	}
	var se *secretError
	if errors.As(err, &se) {
		if st.Secrets == nil {
			st.Secrets = &sandboxv1.SecretsStatus{}
		}
		reason := classify(se).reason
		if !hasCondition(st.Conditions, sandboxv1.ConditionSecretsCurrent, reason) {
			r.Recorder.Eventf(sbx, nil, corev1.EventTypeWarning, reason, "Observe",
				"%s; the Vercel sandbox keeps the values it was given", se.Error())
		}
		markSecrets(sbx, se)
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return secrets, nil
}

// recordedSecrets is what status recorded of each applied Secret, by name.
func recordedSecrets(st *sandboxv1.SandboxStatus) map[string]sandboxv1.AppliedSecret {
	recorded := map[string]sandboxv1.AppliedSecret{}
	if st.Secrets != nil {
		for _, a := range st.Secrets.Applied {
			recorded[a.Name] = a
		}
	}
	return recorded
}

// rotatedSecrets is the names of the applied Secrets whose values differ
// from the digests recorded.
func rotatedSecrets(key []byte, uid types.UID, recorded map[string]sandboxv1.AppliedSecret, applied []sandboxv1.AppliedSecret, secrets *secretReader) []string {
	var rotated []string
	for _, a := range applied {
		if !sameValues(recorded[a.Name].Digest, key, uid, a.Name, secrets.cache[a.Name], secrets.keys[a.Name]) {
			rotated = append(rotated, a.Name)
		}
	}
	return rotated
}

// applyRotation gives Vercel the rotated values (the running session, if
// any, gets them too), announces them, and records them. A running session
// keeps the env values it started with: status marks it stale until it
// stops.
func (r *SandboxReconciler) applyRotation(ctx context.Context, sbx *sandboxv1.Sandbox, secrets *secretReader, applied []sandboxv1.AppliedSecret, rotated []string) error {
	st := &sbx.Status
	uses := secretUses(&sbx.Spec)
	var rotatedUses secretUse
	for _, n := range rotated {
		rotatedUses |= uses[n]
	}
	running := ""
	if st.ExpiresAt != nil {
		running = st.SessionID
	}
	if err := r.apply(ctx, sbx, running, secrets); err != nil {
		if vercel.IsNotFound(err) {
			// Gone: the lifecycle decides on that; a creation reads the
			// current values.
			return nil
		}
		return err
	}
	r.announceRotation(sbx, rotated, uses, running)
	if rotatedUses&useEnv != 0 && running != "" {
		st.Secrets.StaleSession = running
	}
	st.Secrets.Applied = applied
	markSecrets(sbx, nil)
	return nil
}

// announceUpdatedSecrets announces the Secrets a spec update gave Vercel
// new values of: a rotation that meets a spec change (the Secret updated
// before the change's reconcile read it, or between a change's apply and
// its status write) reaches Vercel through the update, not through
// refreshSecrets, and must still say so. Secrets the spec did not
// reference before are not rotations.
func (r *SandboxReconciler) announceUpdatedSecrets(sbx *sandboxv1.Sandbox, secrets *secretReader, running string) {
	st := &sbx.Status
	recorded := recordedSecrets(st)
	if len(recorded) == 0 {
		return
	}
	var known []sandboxv1.AppliedSecret
	for _, a := range appliedSecrets(r.DigestKey, sbx.UID, secrets) {
		if _, ok := recorded[a.Name]; ok {
			known = append(known, a)
		}
	}
	uses := secretUses(&sbx.Spec)
	rotated := rotatedSecrets(r.DigestKey, sbx.UID, recorded, known, secrets)
	if len(rotated) == 0 {
		return
	}
	r.announceRotation(sbx, rotated, uses, running)
	for _, n := range rotated {
		if uses[n]&useEnv != 0 && running != "" {
			st.Secrets.StaleSession = running
		}
	}
}

// announceRotation emits one SecretRotated event per use of the rotated
// Secrets, naming them (never a value) and saying where the values apply.
func (r *SandboxReconciler) announceRotation(sbx *sandboxv1.Sandbox, rotated []string, uses map[string]secretUse, running string) {
	namesWith := func(u secretUse) string {
		var out []string
		for _, n := range rotated {
			if uses[n]&u != 0 {
				out = append(out, n)
			}
		}
		return strings.Join(out, ", ")
	}
	emit := func(format string, args ...any) {
		r.Recorder.Eventf(sbx, nil, corev1.EventTypeNormal, sandboxv1.ReasonSecretRotated, "Update", format, args...)
	}
	if n := namesWith(useHeaders); n != "" {
		if running != "" {
			emit("Secret %s rotated: its injected header values were applied to the running session %s", n, running)
		} else {
			emit("Secret %s rotated: its injected header values were applied to the Vercel sandbox for its next session", n)
		}
	}
	if n := namesWith(useForward); n != "" {
		if running != "" {
			emit("Secret %s rotated: its forward URLs were applied to the running session %s", n, running)
		} else {
			emit("Secret %s rotated: its forward URLs were applied to the Vercel sandbox for its next session", n)
		}
	}
	if n := namesWith(useEnv); n != "" {
		if running != "" {
			emit("Secret %s rotated: its env values apply from the next session (Vercel cannot change a running session's environment); session %s keeps the old ones until it stops", n, running)
		} else {
			emit("Secret %s rotated: its env values apply from the next session", n)
		}
	}
	if n := namesWith(useGit); n != "" {
		emit("Secret %s rotated: its git credentials are used when the Vercel sandbox is next created; the existing clone is unaffected", n)
	}
}

// secretRequests maps a Secret's metadata event to the Sandboxes of its
// namespace that reference it.
func (r *SandboxReconciler) secretRequests(ctx context.Context, obj client.Object) []reconcile.Request {
	var list sandboxv1.SandboxList
	if err := r.List(ctx, &list, client.InNamespace(obj.GetNamespace()), client.MatchingFields{indexSecretRef: obj.GetName()}); err != nil {
		return nil
	}
	return requestsFor(list.Items, func(*sandboxv1.Sandbox) bool { return true })
}

// indexSandboxes adds the Sandbox's field indexes: by spec.source.snapshotRef
// (snapshotRefRequests) and by each Secret its spec references
// (secretRequests).
func indexSandboxes(ctx context.Context, mgr ctrl.Manager) error {
	if err := indexRef(ctx, mgr, &sandboxv1.Sandbox{}, indexSnapshotRef, func(o client.Object) *sandboxv1.LocalObjectReference {
		return o.(*sandboxv1.Sandbox).Spec.Source.SnapshotRef
	}); err != nil {
		return err
	}
	return mgr.GetFieldIndexer().IndexField(ctx, &sandboxv1.Sandbox{}, indexSecretRef, func(o client.Object) []string {
		return referencedSecrets(&o.(*sandboxv1.Sandbox).Spec)
	})
}
