package controllers

// The recipe builder, the act of a build: create the builder sandbox (after
// the quota admits it), run its clone and setup steps detached and polled,
// capture the snapshot, then delete the builder and retire replaced
// snapshots. Progress is read back from Vercel, so a restarted controller
// continues where the last one stopped.

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
	"github.com/getsentry/sandbox-controller/internal/metrics"
	"github.com/getsentry/sandbox-controller/internal/recipe"
	"github.com/getsentry/sandbox-controller/internal/vercel"
)

// snapshotBootPoll is how often a booting builder is polled.
const snapshotBootPoll = time.Second

// Build budgets when the recipe names none.
const (
	defaultBuildTimeout = 30 * time.Minute
	defaultStepTimeout  = 10 * time.Minute
)

// tagContentHash marks a builder sandbox with the short content hash it builds.
const tagContentHash = "k8s-content-hash"

// drive advances this object's build by at most one step: create the
// builder, start the next clone or setup command (detached, polled), or
// capture. Progress is read back from Vercel, so a restarted controller
// continues from the last finished step and never starts a step twice.
// decideClaim says who drives the build, decideBuild what comes next.
func (r *SandboxSnapshotReconciler) drive(ctx context.Context, snap *sandboxv1.SandboxSnapshot, peers []*sandboxv1.SandboxSnapshot, hash, replaces string, serving bool) (ctrl.Result, error) {
	st := &snap.Status
	name := builderName(r.ClusterID, snap.Namespace, hash, replaces)
	if st.Build == nil {
		st.Build = &sandboxv1.SnapshotBuildStatus{}
	}
	o, resp, err := r.observeBuilder(ctx, snap, peers, name, hash)
	if err != nil {
		return ctrl.Result{}, err
	}
	switch decideClaim(o) {
	case claimFailed:
		// Reported already; retried only when the recipe changes.
		return ctrl.Result{}, nil
	case claimNameTaken:
		return r.builderNameTaken(snap, serving, name, resp.Sandbox.Tags), nil
	case claimFollow:
		return r.follow(snap, o.liveOwner, serving), nil
	case claimTakeOver:
		// Its driver is gone: this object takes the build over, and the
		// owner tag says so, for the checks before a delete.
		if _, err := r.api(ctx).UpdateSandbox(ctx, name, vercel.UpdateSandboxRequest{Tags: builderTags(r.ClusterID, snap.UID, hash)}, false); err != nil {
			return ctrl.Result{}, fmt.Errorf("take over builder sandbox %s: %w", name, err)
		}
		r.Recorder.Eventf(snap, nil, corev1.EventTypeNormal, "BuildTakenOver", "Build", "Took over builder sandbox %s, whose SandboxSnapshot is gone", name)
	}
	st.Build.SharedWith = ""
	if err := r.startBuild(ctx, snap, name, replaces, serving); err != nil {
		return ctrl.Result{}, err
	}
	return r.runBuild(ctx, snap, peers, o.found, resp, hash, serving)
}

// observeBuilder reads the builder named name, unless its build failed.
func (r *SandboxSnapshotReconciler) observeBuilder(ctx context.Context, snap *sandboxv1.SandboxSnapshot, peers []*sandboxv1.SandboxSnapshot, name, hash string) (builderObservation, *vercel.SandboxResponse, error) {
	b := snap.Status.Build
	if b.BuilderName == name && b.Failed {
		return builderObservation{failedBefore: true}, nil, nil
	}
	resp, err := r.api(ctx).GetSandbox(ctx, name, false)
	switch {
	case vercel.IsNotFound(err):
		return builderObservation{}, nil, nil
	case err != nil:
		return builderObservation{}, nil, fmt.Errorf("get builder sandbox %s: %w", name, err)
	}
	tags := resp.Sandbox.Tags
	o := builderObservation{found: true, owner: ownerOf(tags, r.ClusterID, snap.UID), hashMatches: tags[tagContentHash] == recipe.Short(hash)}
	o.liveOwner = liveOwner(tags[tagOwnerUID], peers)
	return o, resp, nil
}

// startBuild records a new build under the builder name before the builder
// is created, so a delete after a crash finds it (and deletes it, or nothing
// if it was never created), and a retry adopts it by name.
func (r *SandboxSnapshotReconciler) startBuild(ctx context.Context, snap *sandboxv1.SandboxSnapshot, name, replaces string, serving bool) error {
	b := snap.Status.Build
	building := snapReadiness{phase: sandboxv1.SnapshotBuilding}
	if b.BuilderName != name {
		if old := b.BuilderName; old != "" && !b.Failed {
			// The build under the recorded name was cut short (the base's
			// content changed mid-build, so the hash and the name did): its
			// builder serves nothing now. Deleted before the new name
			// replaces the only record of it, else it would run, and bill,
			// until its timeout. A failed build deleted its own.
			if _, err := r.deleteBuilder(ctx, snap, old, "Build"); err != nil {
				return err
			}
		}
		steps := int32(len(buildSteps(snap.Spec.Source.Recipe)))
		now := metav1.NewTime(r.now().Truncate(time.Second))
		if err := r.patchStatusNow(ctx, snap, func(st *sandboxv1.SandboxSnapshotStatus) {
			b := st.Build
			b.BuilderName, b.SessionID, b.CommandID, b.Step, b.Failed = name, "", "", "boot", false
			b.Attempts++
			b.StartedAt, b.StepStartedAt = &now, &now
			b.CompletedSteps, b.TotalSteps = 0, steps
			if replaces != "" {
				b.Replaces = replaces
			}
			if !serving {
				setSnapshotReady(snap, building)
			}
		}); err != nil {
			return err
		}
	}
	if !serving {
		setSnapshotReady(snap, building)
	}
	return nil
}

// runBuild takes the build's next step, as decideBuild says.
func (r *SandboxSnapshotReconciler) runBuild(ctx context.Context, snap *sandboxv1.SandboxSnapshot, peers []*sandboxv1.SandboxSnapshot, found bool, resp *vercel.SandboxResponse, hash string, serving bool) (ctrl.Result, error) {
	b := snap.Status.Build
	rcp := snap.Spec.Source.Recipe
	budget := defaultBuildTimeout
	if rcp.TimeoutSeconds != nil {
		budget = time.Duration(*rcp.TimeoutSeconds) * time.Second
	}
	p := buildProgress{
		overBudget:      b.StartedAt != nil && r.now().Sub(b.StartedAt.Time) > budget,
		found:           found,
		sessionRecorded: b.SessionID != "",
	}
	if found {
		p.currentSnapshot, p.session = resp.Sandbox.CurrentSnapshotID, resp.Session
	}
	switch decideBuild(p) {
	case buildTimedOut:
		return r.buildFailed(ctx, snap, serving, fmt.Sprintf("The build exceeded its total time budget of %s during %s", budget, b.Step))
	case buildRecover:
		// The builder was deleted after its capture, before the result was
		// recorded.
		s, err := r.builderSnapshot(ctx, b.BuilderName)
		switch {
		case err != nil:
			return ctrl.Result{}, err
		case s != nil:
			// Its builder is gone: no read proves it now (the name
			// fallback of snapshotIsOurs still may).
			return r.built(ctx, snap, s, false)
		}
		return r.createBuilder(ctx, snap, b.BuilderName, hash, budget, serving)
	case buildCreate:
		return r.createBuilder(ctx, snap, b.BuilderName, hash, budget, serving)
	case buildCaptured:
		id := p.currentSnapshot
		s, err := r.api(ctx).GetSnapshot(ctx, id)
		if err != nil {
			return ctrl.Result{}, fmt.Errorf("get snapshot %s: %w", id, err)
		}
		// The builder, read this reconcile, is this object's (decideClaim).
		return r.built(ctx, snap, s, true)
	case buildBooting:
		r.building(snap, serving, "Waiting for the builder session to start")
		return ctrl.Result{RequeueAfter: snapshotBootPoll}, nil
	case buildSessionEnded:
		return r.buildFailed(ctx, snap, serving, fmt.Sprintf("The builder session %s %s during %s", p.session.ID, p.session.Status, b.Step))
	}
	b.SessionID = p.session.ID
	return r.advance(ctx, snap, buildSteps(rcp), p.session.ID, sharedExpiration(snap, peers), serving)
}

// builderTags are the tags of a builder: its owner's and the content hash.
func builderTags(cluster string, uid types.UID, hash string) map[string]string {
	tags := ownerTags(cluster, uid)
	tags[tagContentHash] = recipe.Short(hash)
	return tags
}

// builderNameTaken reports a builder name held by a Vercel sandbox that is
// not a builder of this hash in this cluster: it is left alone, and the
// build waits for the name to be free.
func (r *SandboxSnapshotReconciler) builderNameTaken(snap *sandboxv1.SandboxSnapshot, serving bool, name string, tags map[string]string) ctrl.Result {
	st := &snap.Status
	msg := fmt.Sprintf("A Vercel sandbox named %s exists but was not created for this build (%s); it is left alone", name, describeOwner(tags, r.ClusterID))
	if !hasCondition(st.Conditions, sandboxv1.ConditionReady, sandboxv1.ReasonNameConflict) {
		r.Recorder.Eventf(snap, nil, corev1.EventTypeWarning, sandboxv1.ReasonNameConflict, "Build", "%s", msg)
	}
	setSnapshotReady(snap, buildReadiness(serving, st.SnapshotID, sandboxv1.SnapshotFailed, sandboxv1.ReasonNameConflict, msg, "; its rebuild cannot start"))
	return ctrl.Result{RequeueAfter: snapshotRefPoll}
}

// deleteBuilder deletes the builder sandbox name after reading it: only a
// builder of this cluster, in this namespace, tagged as this object's. It
// reports whether it deleted one. Anything else is left alone, and a
// sandbox that is not the operator's at all is reported.
func (r *SandboxSnapshotReconciler) deleteBuilder(ctx context.Context, snap *sandboxv1.SandboxSnapshot, name, why string) (bool, error) {
	resp, err := r.api(ctx).GetSandbox(ctx, name, false)
	switch {
	case vercel.IsNotFound(err):
		// A 404 counts only once Vercel knows the project (with a wrong
		// project id every read answers 404): the client's delete checks.
		if _, err := r.api(ctx).DeleteSandbox(ctx, name, false); err != nil && !vercel.IsNotFound(err) {
			return false, fmt.Errorf("delete builder sandbox %s: %w", name, err)
		}
		r.Quota.ReleaseBuild(ctx, snap.Namespace, name)
		return false, nil
	case err != nil:
		return false, fmt.Errorf("get builder sandbox %s: %w", name, err)
	}
	tags := resp.Sandbox.Tags
	switch o := ownerOf(tags, r.ClusterID, snap.UID); {
	case o == ownedByPeer:
		return false, nil
	case o != ownedBySelf || !builderNamePattern(r.ClusterID, snap.Namespace).MatchString(name):
		r.Recorder.Eventf(snap, nil, corev1.EventTypeWarning, sandboxv1.ReasonNameConflict, "Delete",
			"Left Vercel sandbox %s alone: it is not this object's builder (%s)", name, describeOwner(tags, r.ClusterID))
		return false, nil
	}
	if _, err := r.api(ctx).DeleteSandbox(ctx, name, false); err != nil && !vercel.IsNotFound(err) {
		return false, fmt.Errorf("delete builder sandbox %s: %w", name, err)
	}
	r.Quota.ReleaseBuild(ctx, snap.Namespace, name)
	r.Recorder.Eventf(snap, nil, corev1.EventTypeNormal, "Deleted", why, "Deleted builder sandbox %s", name)
	return true, nil
}

func (r *SandboxSnapshotReconciler) createBuilder(ctx context.Context, snap *sandboxv1.SandboxSnapshot, name, hash string, budget time.Duration, serving bool) (ctrl.Result, error) {
	if wait, err := r.waitForBuildQuota(ctx, snap, name, serving); wait || err != nil {
		return ctrl.Result{RequeueAfter: quotaRecheck}, err
	}
	req := builderRequest(name, builderTags(r.ClusterID, snap.UID, hash), snap.Spec.Source.Recipe, budget)
	if snap.Spec.Source.Recipe.Runtime == nil {
		base, msg := r.readyBase(ctx, snap)
		if base == nil {
			return r.waitForBase(ctx, snap, msg)
		}
		req.Source = &vercel.Source{Type: vercel.SourceSnapshot, SnapshotID: base.Status.SnapshotID}
	}
	resp, err := r.api(ctx).CreateSandbox(ctx, req)
	switch {
	case vercel.IsConflict(err):
		// Created meanwhile (a lost answer, or another user): found next time.
		return ctrl.Result{RequeueAfter: snapshotBootPoll}, nil
	case err != nil:
		return ctrl.Result{}, fmt.Errorf("create builder sandbox %s: %w", name, err)
	}
	// A new builder runs the steps from the first.
	b := snap.Status.Build
	b.SessionID, b.CommandID, b.CompletedSteps = sessionID(resp), "", 0
	logf.FromContext(ctx).Info("Created builder sandbox", "vercelName", name, "session", snap.Status.Build.SessionID)
	r.Recorder.Eventf(snap, nil, corev1.EventTypeNormal, "BuildStarted", "Build", "Created builder sandbox %s for content hash %s", name, recipe.Short(hash))
	r.building(snap, serving, "Booting the builder sandbox "+name)
	return ctrl.Result{RequeueAfter: snapshotBootPoll}, nil
}

// advance runs the build's steps through the step runner (steps.go): it
// polls the running step, starts the next, or, once every step succeeded,
// captures. A step started before a crash lost its id is found again by its
// marker in the builder's command list.
func (r *SandboxSnapshotReconciler) advance(ctx context.Context, snap *sandboxv1.SandboxSnapshot, steps []buildStep, sessionID string, expiration *time.Duration, serving bool) (ctrl.Result, error) {
	b := snap.Status.Build
	run := stepRun{
		api:     r.api(ctx),
		session: sessionID,
		n:       len(steps),
		marker:  buildMarker,
		request: func(ctx context.Context, i int) (vercel.RunCommandRequest, []string, error) {
			req, secrets, err := r.stepRequest(ctx, snap, steps[i])
			if err == nil {
				r.sentSecrets.remember(snap.UID, secrets)
			}
			return req, secrets, err
		},
		label: func(i int) string { return "build step " + steps[i].label },
		started: func(i int, cmd *vercel.Command) {
			r.Recorder.Eventf(snap, nil, corev1.EventTypeNormal, "StepStarted", "Build", "Started build step %d of %d (%s)", i+1, len(steps), steps[i].label)
		},
	}
	cur := stepCursor{completed: int(b.CompletedSteps), commandID: b.CommandID, session: sessionID}
	res, err := run.advance(ctx, &cur)
	b.CompletedSteps = int32(cur.completed)
	if err != nil {
		return ctrl.Result{}, err
	}
	switch res.state {
	case stepRunning:
		i := cur.completed
		if b.CommandID != res.cmd.ID {
			b.CommandID, b.StepStartedAt = res.cmd.ID, msTime(res.cmd.StartedAt)
			if res.started {
				now := metav1.NewTime(r.now().Truncate(time.Second))
				b.StepStartedAt = &now
			}
		}
		b.Step = steps[i].label
		r.building(snap, serving, fmt.Sprintf("Running build step %d of %d (%s)", i+1, len(steps), steps[i].label))
		return ctrl.Result{RequeueAfter: snapshotBuildPoll}, nil
	case stepFailed:
		return r.stepFailed(ctx, snap, serving, steps[cur.completed], cur.completed, len(steps), sessionID, res.cmd)
	}
	return r.captureBuild(ctx, snap, sessionID, expiration, serving)
}

// buildMarker names build step i (from 0) in the builder's session, which
// runs one build.
func buildMarker(i int) string {
	return fmt.Sprintf("sandbox-build:step=%d", i+1)
}

// captureBuild captures the builder once every step succeeded.
func (r *SandboxSnapshotReconciler) captureBuild(ctx context.Context, snap *sandboxv1.SandboxSnapshot, sessionID string, expiration *time.Duration, serving bool) (ctrl.Result, error) {
	b := snap.Status.Build
	// Every step succeeded: capture. The intent is written first; a restart
	// finds the snapshot as the builder's currentSnapshotId.
	if err := r.patchStatusNow(ctx, snap, func(st *sandboxv1.SandboxSnapshotStatus) {
		st.Build.Step, st.Build.CommandID = "capture", ""
		if !serving {
			setSnapshotReady(snap, snapReadiness{phase: sandboxv1.SnapshotCapturing})
		}
	}); err != nil {
		return ctrl.Result{}, err
	}
	resp, err := r.api(ctx).CreateSnapshot(ctx, sessionID, expiration)
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("capture builder session %s: %w", sessionID, err)
	}
	r.Recorder.Eventf(snap, nil, corev1.EventTypeNormal, "SnapshotCreated", "CreateSnapshot", "Captured builder %s as snapshot %s", b.BuilderName, resp.Snapshot.ID)
	// The capture stopped the builder's session: its answer carries the
	// session's final usage (sandbox_usage.go).
	snap.Status.Usage = foldUsage(snap.Status.Usage, usageAnswer{vercelName: b.BuilderName, session: resp.Session,
		snapshot: &resp.Snapshot, currentSnapshotID: resp.Snapshot.ID, now: r.now()})
	return r.built(ctx, snap, &resp.Snapshot, true)
}

// stepRequest is the command of one build step. Clone credentials go into the
// clone command's environment only, through a credential helper given on the
// command line, so they are neither in the repository's config nor in any
// later step's environment.
func (r *SandboxSnapshotReconciler) stepRequest(ctx context.Context, snap *sandboxv1.SandboxSnapshot, step buildStep) (vercel.RunCommandRequest, []string, error) {
	rcp := snap.Spec.Source.Recipe
	if s := step.setup; s != nil {
		req := vercel.RunCommandRequest{Command: s.Command, Args: s.Args, Cwd: s.Cwd, Env: recipe.StepEnv(rcp, *s), Sudo: s.Sudo, Timeout: defaultStepTimeout.Milliseconds()}
		if req.Args == nil {
			req.Args = []string{}
		}
		if s.TimeoutSeconds != nil {
			req.Timeout = int64(*s.TimeoutSeconds) * 1000
		}
		if s.User != "" {
			req = asUserRequest(req, s.User)
		}
		return req, nil, nil
	}
	repo := step.repo
	env := map[string]string{
		"GIT_TERMINAL_PROMPT": "0",
		"CLONE_URL":           repo.URL,
		"CLONE_DEST":          recipe.DefaultCwd + "/" + recipe.CleanPath(repo.Path),
		"CLONE_REVISION":      repo.Revision,
	}
	secrets := &secretReader{reader: r.APIReader, namespace: snap.Namespace}
	if c := repo.Credentials; c != nil {
		u, p, err := secrets.gitCredentials(ctx, c.SecretName)
		if err != nil {
			return vercel.RunCommandRequest{}, nil, err
		}
		env["GIT_USERNAME"], env["GIT_PASSWORD"] = u, p
	}
	clone := "git -c credential.helper= -c 'credential.helper=!f() { test \"$1\" = get || exit 0; echo \"username=${GIT_USERNAME:-}\"; echo \"password=${GIT_PASSWORD:-}\"; }; f' clone --quiet"
	if repo.Depth != nil {
		clone += fmt.Sprintf(" --depth %d --no-single-branch", *repo.Depth)
	}
	script := strings.Join([]string{
		"set -eu",
		`mkdir -p "$(dirname "$CLONE_DEST")"`,
		clone + ` -- "$CLONE_URL" "$CLONE_DEST"`,
		`if [ -n "$CLONE_REVISION" ]; then git -C "$CLONE_DEST" checkout --quiet "$CLONE_REVISION"; fi`,
	}, "\n")
	return vercel.RunCommandRequest{Command: "sh", Args: []string{"-c", script}, Env: env, Timeout: defaultStepTimeout.Milliseconds()}, secrets.values, nil
}

// building reports a build in progress: Ready=False, or still True with
// reason Rebuilding while the old snapshot is served.
func (r *SandboxSnapshotReconciler) building(snap *sandboxv1.SandboxSnapshot, serving bool, msg string) {
	setSnapshotReady(snap, buildingReadiness(serving, snap.Status.SnapshotID, msg))
}

// stepFailed reports the failed step with its exit code and output tail.
func (r *SandboxSnapshotReconciler) stepFailed(ctx context.Context, snap *sandboxv1.SandboxSnapshot, serving bool, step buildStep, i, n int, sessionID string, c *vercel.Command) (ctrl.Result, error) {
	_, secrets, _ := r.stepRequest(ctx, snap, step)
	secrets = r.sentSecrets.with(snap.UID, secrets)
	tail, err := commandOutputTail(ctx, r.api(ctx), sessionID, c.ID, secrets)
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("read output of build step %s: %w", step.label, err)
	}
	msg := fmt.Sprintf("Build step %d of %d (%s) exited with code %d", i+1, n, step.label, *c.ExitCode)
	if *c.ExitCode == exitKilledByTimeout {
		msg += " (killed: its time budget ran out)"
	}
	if tail != "" {
		msg += ": " + tail
	}
	return r.buildFailed(ctx, snap, serving, scrub(msg, secrets))
}

// exitKilledByTimeout is the exit code of a command Vercel killed (SIGKILL).
const exitKilledByTimeout = 137

// buildFailed records a failed build, deletes the builder and does not retry
// until the recipe changes. A rebuild that fails keeps serving the old snapshot.
func (r *SandboxSnapshotReconciler) buildFailed(ctx context.Context, snap *sandboxv1.SandboxSnapshot, serving bool, msg string) (ctrl.Result, error) {
	st := &snap.Status
	b := st.Build
	if _, err := r.deleteBuilder(ctx, snap, b.BuilderName, "Build"); err != nil {
		return ctrl.Result{}, err
	}
	b.Failed, b.CommandID = true, ""
	if b.StartedAt != nil {
		metrics.ObserveSnapshotBuild(metrics.BuildFailed, r.now().Sub(b.StartedAt.Time))
	}
	r.Recorder.Eventf(snap, nil, corev1.EventTypeWarning, sandboxv1.ReasonBuildFailed, "Build", "%s", truncate(msg, maxEventNote))
	setSnapshotReady(snap, buildReadiness(serving, st.SnapshotID, sandboxv1.SnapshotFailed, sandboxv1.ReasonBuildFailed, msg, "; its rebuild failed"))
	return ctrl.Result{}, nil
}

// built records the captured snapshot and deletes the builder. proven says
// that a read of this reconcile showed the builder this object's: the proof
// is recorded before the builder, the only other proof, is deleted.
func (r *SandboxSnapshotReconciler) built(ctx context.Context, snap *sandboxv1.SandboxSnapshot, s *vercel.Snapshot, proven bool) (ctrl.Result, error) {
	st := &snap.Status
	b := st.Build
	if st.SnapshotID != "" && st.SnapshotID != s.ID {
		b.Replaces, b.ReplacesSourceVercelName, b.ReplacesProof = st.SnapshotID, replacedSource(snap, st.SnapshotID), st.SnapshotProof
		st.SnapshotProof = ""
	}
	st.SnapshotID = s.ID
	if proven {
		r.prove(snap, s.ID)
	}
	r.markReady(snap, s)
	now := r.now()
	if b.StartedAt != nil {
		d := now.Sub(b.StartedAt.Time)
		secs := int64(d.Round(time.Second) / time.Second)
		b.DurationSeconds = &secs
		metrics.ObserveSnapshotBuild(metrics.BuildSucceeded, d)
	}
	done := metav1.NewTime(now.Truncate(time.Second))
	b.CompletedAt = &done
	b.Step, b.CommandID, b.CompletedSteps = "", "", b.TotalSteps
	r.Recorder.Eventf(snap, nil, corev1.EventTypeNormal, "Built", "Build", "Built snapshot %s in builder %s", s.ID, b.BuilderName)
	if err := r.cleanupBuilder(ctx, snap); err != nil {
		return ctrl.Result{}, err
	}
	// Retire the replaced snapshot on the next reconcile, once status says
	// which one is served now.
	return ctrl.Result{RequeueAfter: time.Second}, nil
}

// cleanupBuilder deletes the builder of a finished build.
func (r *SandboxSnapshotReconciler) cleanupBuilder(ctx context.Context, snap *sandboxv1.SandboxSnapshot) error {
	b := snap.Status.Build
	if b == nil || b.BuilderName == "" || b.Failed {
		return nil
	}
	if _, err := r.deleteBuilder(ctx, snap, b.BuilderName, "Build"); err != nil {
		return err
	}
	b.BuilderName, b.SessionID = "", ""
	return nil
}

// retire deletes the snapshot a rebuild replaced once no other
// SandboxSnapshot holds it.
func (r *SandboxSnapshotReconciler) retire(ctx context.Context, snap *sandboxv1.SandboxSnapshot, all []sandboxv1.SandboxSnapshot) (ctrl.Result, error) {
	b := snap.Status.Build
	if b == nil || b.Replaces == "" || b.Replaces == snap.Status.SnapshotID {
		return ctrl.Result{}, nil
	}
	old := b.Replaces
	switch {
	case snap.Spec.DeletionPolicy == sandboxv1.DeletionPolicyRetain:
	case holdsSnapshot(snap, all, old):
		// Another user still serves it; it switches on its next reconcile.
		return ctrl.Result{RequeueAfter: snapshotWaitPoll}, nil
	default:
		found, err := r.snapshotIsOurs(ctx, snap, old)
		if err != nil {
			return ctrl.Result{}, err
		}
		if found == snapshotForeign {
			r.foreignSnapshotKept(snap, old)
			break
		}
		if _, err := r.api(ctx).DeleteSnapshot(ctx, old); err != nil && !vercel.IsNotFound(err) && !vercel.IsGone(err) {
			return ctrl.Result{}, fmt.Errorf("retire snapshot %s: %w", old, err)
		}
		r.Recorder.Eventf(snap, nil, corev1.EventTypeNormal, "Retired", "Delete", "Deleted Vercel snapshot %s, replaced by %s", old, snap.Status.SnapshotID)
	}
	b.Replaces, b.ReplacesProof = "", ""
	return ctrl.Result{}, nil
}

// builderSnapshot finds the snapshot taken of a (since deleted) builder.
func (r *SandboxSnapshotReconciler) builderSnapshot(ctx context.Context, name string) (*vercel.Snapshot, error) {
	snaps, err := r.api(ctx).ListAllSnapshots(ctx, vercel.ListSnapshotsOptions{Name: name})
	if err != nil {
		return nil, fmt.Errorf("list snapshots of %s: %w", name, err)
	}
	for i := range snaps {
		if snaps[i].Status == vercel.SnapshotCreated {
			return &snaps[i], nil
		}
	}
	return nil, nil
}

// builderSnapshots lists the live snapshots taken of a builder: a capture
// whose answer was lost, or taken just before a crash, is recorded nowhere
// else.
func (r *SandboxSnapshotReconciler) builderSnapshots(ctx context.Context, name string) ([]string, error) {
	snaps, err := r.api(ctx).ListAllSnapshots(ctx, vercel.ListSnapshotsOptions{Name: name})
	if err != nil {
		return nil, fmt.Errorf("list snapshots of %s: %w", name, err)
	}
	var ids []string
	for _, s := range snaps {
		if s.Status == vercel.SnapshotCreated {
			ids = append(ids, s.ID)
		}
	}
	return ids, nil
}
