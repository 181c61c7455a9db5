package controllers

// The Sandbox's actions: what the reconciler does for a decision (see
// sandbox_decide.go) — create, apply a changed spec, stop, resume, keep a
// running session (setup, extension) or delete the Sandbox at its shutdown
// time — and the one place its phase and Ready condition are written.

import (
	"cmp"
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
	"github.com/getsentry/sandbox-controller/internal/vercel"
)

// act decides on l and performs the decision. A create or a resume answers
// with the sandbox's new state: next, to decide on in turn. After the last
// action, a rewind that waits or failed is reported and status.history is
// brought up to date.
func (r *SandboxReconciler) act(ctx context.Context, sbx *sandboxv1.Sandbox, l lifecycle) (res ctrl.Result, next *observation, err error) {
	if l.rewind, err = r.planRewind(ctx, sbx, l.obs); err != nil {
		return ctrl.Result{}, nil, err
	}
	d := decide(l)
	prev := meta.FindStatusCondition(sbx.Status.Conditions, sandboxv1.ConditionReady)
	if prev != nil {
		prev = prev.DeepCopy()
	}
	res, next, err = r.perform(ctx, sbx, l, d)
	if next == nil && err == nil && d.action != actShutdownDelete && d.action != actIdleDelete {
		res = settleRewind(sbx, prev, d, res)
		r.refreshHistory(ctx, sbx)
	}
	return res, next, err
}

// perform performs decision d on l.
func (r *SandboxReconciler) perform(ctx context.Context, sbx *sandboxv1.Sandbox, l lifecycle, d decision) (res ctrl.Result, next *observation, err error) {
	switch d.action {
	case actShutdownDelete:
		res, err = r.shutdownDelete(ctx, sbx)
		return res, nil, err
	case actStop:
		res, err = r.stop(ctx, sbx, l, d)
		return res, nil, err
	case actRun:
		res, err = r.run(ctx, sbx, l, d)
		return res, nil, err
	}
	if err := r.applyObserved(ctx, sbx, d); err != nil {
		return ctrl.Result{}, nil, err
	}
	if d.action == actRewind {
		return r.rewind(ctx, sbx, l, d)
	}
	if startsSession(d.action) {
		// The one quota check before Vercel is asked to start a session.
		if wait, err := r.waitForQuota(ctx, sbx); wait || err != nil {
			return ctrl.Result{RequeueAfter: quotaRecheck}, nil, err
		}
	}
	switch d.action {
	case actCreate:
		return r.create(ctx, sbx)
	case actResume:
		return r.resume(ctx, sbx)
	case actRecreate:
		return r.recreate(ctx, sbx, d.recreateWhy)
	}
	r.applyResting(sbx, l, d)
	if d.action == actIdleDelete {
		res, err = r.idleDelete(ctx, sbx, d.deleteWhy)
		return res, nil, err
	}
	return ctrl.Result{RequeueAfter: d.requeue}, nil, nil
}

// applyObserved records what d says of the session seen (the time it
// stopped, the event of a newly classified state) and applies a changed spec
// to it, before any action.
func (r *SandboxReconciler) applyObserved(ctx context.Context, sbx *sandboxv1.Sandbox, d decision) error {
	if d.stoppedAt != nil {
		sbx.Status.StoppedAt = d.stoppedAt
	}
	if d.update {
		if err := r.update(ctx, sbx, ""); err != nil {
			return err
		}
	}
	if e := d.event; e != nil {
		r.Recorder.Eventf(sbx, nil, e.eventType, e.reason, "Observe", "%s", e.note)
	}
	return nil
}

// applyResting writes a decision that starts no session: the readiness, the
// routes of a sandbox that has none, and the warnings of a coming shutdown
// or idle deletion.
func (r *SandboxReconciler) applyResting(sbx *sandboxv1.Sandbox, l lifecycle, d decision) {
	st := &sbx.Status
	if d.noSession {
		st.Routes, st.ExpiresAt = nil, nil
	}
	if d.ready != nil {
		setReady(sbx, *d.ready)
	}
	if d.forgetPoll {
		r.forgetPoll(client.ObjectKeyFromObject(sbx))
	}
	if d.warn {
		r.warnShutdown(sbx, l.shutdown, false)
	}
	if !d.idleWarnAt.IsZero() {
		r.warnIdleDeletion(sbx, d.idleWarnAt)
	}
}

// create creates the Vercel sandbox from the spec, or adopts the one a lost
// answer left under this object's name.
func (r *SandboxReconciler) create(ctx context.Context, sbx *sandboxv1.Sandbox) (ctrl.Result, *observation, error) {
	st := &sbx.Status
	if sbx.Spec.Source.Adopt != nil {
		return r.adoptExisting(ctx, sbx)
	}
	source, retry, ok, err := r.resolveSource(ctx, sbx)
	if err != nil {
		return ctrl.Result{}, nil, err
	}
	if !ok {
		return ctrl.Result{RequeueAfter: retry}, nil, nil
	}
	secrets := &secretReader{reader: r.APIReader, namespace: sbx.Namespace}
	cfg, err := buildConfig(ctx, secrets, &sbx.Spec)
	if err != nil {
		return ctrl.Result{RequeueAfter: snapshotRefPoll}, nil, err
	}
	req := vercel.CreateSandboxRequest{
		Name:          st.VercelName,
		Resources:     cfg.resources,
		Ports:         cfg.ports,
		Timeout:       r.sessionTimeoutMs(sbx, cfg.timeoutMs),
		Env:           cfg.env,
		Persistent:    sbx.Spec.Persistent,
		NetworkPolicy: cfg.networkPolicy,
		Tags:          ownerTags(r.ClusterID, sbx.UID),
		// Every session can serve an interactive shell (`kubectl sandbox
		// shell`, the SDK's openInteractive), as the official CLI asks for
		// on every create; docs/dev/interactive-sessions.md.
		Interactive:     true,
		Region:          cfg.placement.region,
		FailoverRegions: cfg.placement.failover,
	}
	if rt := cfg.retention; rt != nil {
		req.KeepLastSnapshots, req.SnapshotExpiration = rt.keepLast, rt.snapshotExpiration
	}
	if err := buildSource(ctx, secrets, &source, &req); err != nil {
		return ctrl.Result{RequeueAfter: snapshotRefPoll}, nil, err
	}
	r.sentSecrets.remember(sbx.UID, secrets.values)
	resp, err := r.api(ctx).CreateSandbox(ctx, req)
	if vercel.IsConflict(err) {
		return r.adopt(ctx, sbx)
	}
	if err != nil {
		return ctrl.Result{}, nil, redact(fmt.Errorf("create sandbox %s: %w", st.VercelName, err), secrets.values)
	}
	logf.FromContext(ctx).Info("Created Vercel sandbox", "vercelName", st.VercelName, "session", sessionID(resp))
	name := st.VercelName
	deferToStatusWrite(ctx, func() {
		r.Recorder.Eventf(sbx, nil, corev1.EventTypeNormal, "Created", "Create", "Created Vercel sandbox %s", name)
	})
	if id := source.SnapshotID; id != nil {
		st.BootedFrom = bootedFrom(sbx, *id)
		if snap := r.bootedSnapshot(ctx, sbx, *id); snap != nil {
			st.BootedFrom.ContentHash = snap.Status.ContentHash
		}
	}
	st.ObservedGeneration = sbx.Generation
	if st.Secrets != nil {
		st.Secrets.StaleSession = ""
	}
	r.recordSecrets(sbx, secrets)
	recordRetention(sbx, cfg.retention)
	o := record(sbx, resp, r.now())
	return ctrl.Result{}, &o, nil
}

// adopt takes over the sandbox a create found under this object's name, if
// its owner tag says it was created for this object.
func (r *SandboxReconciler) adopt(ctx context.Context, sbx *sandboxv1.Sandbox) (ctrl.Result, *observation, error) {
	resp, err := r.api(ctx).GetSandbox(ctx, sbx.Status.VercelName, false)
	if err != nil {
		return ctrl.Result{}, nil, fmt.Errorf("get sandbox %s: %w", sbx.Status.VercelName, err)
	}
	o := r.observe(ctx, sbx, resp)
	return ctrl.Result{}, &o, nil
}

// adoptExisting takes over the Vercel sandbox spec.source.adopt names: one
// without owner tags (made outside the operator) is tagged as this object's,
// one already this object's (an adoption whose answer was lost) is kept, and
// one tagged by another object or cluster is refused and left alone. The
// sandbox is taken as it is: its session keeps running, and the spec is
// applied to it from the next spec change on.
func (r *SandboxReconciler) adoptExisting(ctx context.Context, sbx *sandboxv1.Sandbox) (ctrl.Result, *observation, error) {
	st := &sbx.Status
	name := sbx.Spec.Source.Adopt.Name
	resp, err := r.api(ctx).GetSandbox(ctx, name, false)
	switch {
	case vercel.IsNotFound(err):
		msg := fmt.Sprintf("Vercel sandbox %s, named by spec.source.adopt, does not exist", name)
		if !hasCondition(st.Conditions, sandboxv1.ConditionReady, sandboxv1.ReasonNotFound) {
			r.Recorder.Eventf(sbx, nil, corev1.EventTypeWarning, sandboxv1.ReasonNotFound, "Adopt", "%s", msg)
		}
		setReady(sbx, readiness{sandboxv1.SandboxPending, metav1.ConditionFalse, sandboxv1.ReasonNotFound, msg})
		return ctrl.Result{RequeueAfter: snapshotRefPoll}, nil, nil
	case err != nil:
		return ctrl.Result{}, nil, fmt.Errorf("get sandbox %s to adopt: %w", name, err)
	}
	tags := resp.Sandbox.Tags
	switch ownerOf(tags, r.ClusterID, sbx.UID) {
	case ownedBySelf:
	case unowned:
		want, err := adoptionTags(tags, r.ClusterID, sbx.UID)
		if err != nil {
			return r.refuseAdoption(sbx, fmt.Sprintf("Cannot adopt Vercel sandbox %s: %v", name, err))
		}
		patched, err := r.api(ctx).UpdateSandbox(ctx, name, vercel.UpdateSandboxRequest{Tags: want}, false)
		if err != nil {
			return ctrl.Result{}, nil, fmt.Errorf("tag sandbox %s on adoption: %w", name, err)
		}
		resp.Sandbox = patched.Sandbox
		logf.FromContext(ctx).Info("Adopted Vercel sandbox", "vercelName", name, "session", sessionID(resp))
		r.Recorder.Eventf(sbx, nil, corev1.EventTypeNormal, "Adopted", "Adopt", "Adopted Vercel sandbox %s (session %s) and tagged it as this object's", name, sessionID(resp))
	default:
		return r.refuseAdoption(sbx, fmt.Sprintf("Vercel sandbox %s is %s; it is left alone", name, describeOwner(tags, r.ClusterID)))
	}
	st.ObservedGeneration = sbx.Generation
	o := record(sbx, resp, r.now())
	return ctrl.Result{}, &o, nil
}

// refuseAdoption reports a sandbox that cannot be adopted; it is looked at
// again now and then, in case its owner releases it.
func (r *SandboxReconciler) refuseAdoption(sbx *sandboxv1.Sandbox, msg string) (ctrl.Result, *observation, error) {
	if !hasCondition(sbx.Status.Conditions, sandboxv1.ConditionReady, sandboxv1.ReasonOwnedElsewhere) {
		r.Recorder.Eventf(sbx, nil, corev1.EventTypeWarning, sandboxv1.ReasonOwnedElsewhere, "Adopt", "%s", msg)
	}
	setReady(sbx, readiness{sandboxv1.SandboxFailed, metav1.ConditionFalse, sandboxv1.ReasonOwnedElsewhere, msg})
	return ctrl.Result{RequeueAfter: snapshotRefPoll}, nil, nil
}

// update applies a changed spec to the Vercel sandbox: PATCH changes the
// defaults of future sessions, and the network policy is also applied to the
// running session.
func (r *SandboxReconciler) update(ctx context.Context, sbx *sandboxv1.Sandbox, sessionID string) error {
	secrets := &secretReader{reader: r.APIReader, namespace: sbx.Namespace}
	if err := r.apply(ctx, sbx, sessionID, secrets); err != nil {
		return err
	}
	r.Recorder.Eventf(sbx, nil, corev1.EventTypeNormal, "Updated", "Update", "Applied spec generation %d to Vercel sandbox %s", sbx.Generation, sbx.Status.VercelName)
	r.announceUpdatedSecrets(sbx, secrets, sessionID)
	sbx.Status.ObservedGeneration = sbx.Generation
	// Git credentials serve only a creation: one that cannot be read does
	// not hold up an update, it is reported by refreshSecrets.
	_ = readGitCredentials(ctx, secrets, &sbx.Spec.Source)
	r.recordSecrets(sbx, secrets)
	return nil
}

// apply sends the spec, with the Secret values secrets reads, to the Vercel
// sandbox (for its next sessions) and the network policy to the running
// session sessionID, if any.
func (r *SandboxReconciler) apply(ctx context.Context, sbx *sandboxv1.Sandbox, sessionID string, secrets *secretReader) error {
	cfg, err := buildConfig(ctx, secrets, &sbx.Spec)
	if err != nil {
		return err
	}
	r.sentSecrets.remember(sbx.UID, secrets.values)
	// No policy is allow-all, sent as such: an omitted field would leave a
	// removed policy in place for the next sessions.
	np := cfg.networkPolicy
	if np == nil {
		np = &vercel.NetworkPolicy{Mode: vercel.NetworkAllowAll}
	}
	req := vercel.UpdateSandboxRequest{Resources: cfg.resources, Timeout: r.sessionTimeoutMs(sbx, cfg.timeoutMs), Env: cfg.env, Ports: cfg.ports, NetworkPolicy: np,
		Region: cmp.Or(cfg.placement.region, vercel.DefaultRegion), FailoverRegions: cfg.placement.failover}
	if req.FailoverRegions == nil {
		// Both sent, the region as Vercel's default when unset and the list
		// empty, not omitted: a removed spec.region or failover list must not
		// stay in place for the next sessions.
		req.FailoverRegions = []string{}
	}
	if rt := cfg.retention; rt != nil {
		req.KeepLastSnapshots, req.SnapshotExpiration = rt.keepLast, rt.snapshotExpiration
	}
	if req.Env == nil {
		req.Env = map[string]string{}
	}
	if req.Ports == nil {
		req.Ports = []int64{}
	}
	resp, err := r.api(ctx).UpdateSandbox(ctx, sbx.Status.VercelName, req, false)
	if err != nil {
		return redact(fmt.Errorf("update sandbox %s: %w", sbx.Status.VercelName, err), secrets.values)
	}
	recordRetention(sbx, cfg.retention)
	if sessionID != "" {
		// Only a running session's routes and policy change now; a stopped
		// sandbox gets both with its next session.
		sbx.Status.Routes = routes(resp.Routes)
		if _, err := r.api(ctx).UpdateNetworkPolicy(ctx, sessionID, *np); err != nil && !vercel.IsGone(err) {
			return redact(fmt.Errorf("update network policy of session %s: %w", sessionID, err), secrets.values)
		}
	}
	return nil
}

// run keeps a running session: it applies a changed spec, runs setup, reports
// the session Running once setup has succeeded on its filesystem (and Ready
// once the readiness probe, if any, allows it: sandbox_probe.go), and extends
// it when its deadline comes near and a heartbeat (or a running setup
// command) asks for more time.
func (r *SandboxReconciler) run(ctx context.Context, sbx *sandboxv1.Sandbox, l lifecycle, d decision) (ctrl.Result, error) {
	id := l.obs.sessionID
	sbx.Status.StoppedAt = nil
	if d.update {
		if err := r.update(ctx, sbx, id); err != nil {
			return ctrl.Result{}, err
		}
	}
	progress, err := r.runSetup(ctx, sbx, id)
	if err != nil {
		return ctrl.Result{}, err
	}
	switch progress {
	case setupFailed:
		// Ready stays False; the session lives out its idle window for
		// whoever wants to look at it.
		return ctrl.Result{}, nil
	case setupRunning:
		// A running setup command is activity: the session is extended
		// while it runs, so a step longer than the idle window (npm ci)
		// is not cut off, and the command is polled.
		d.keep, d.extend = d.keep.duringSetup(l.now, setupPoll)
		res, err := r.keepAlive(ctx, sbx, l, d)
		if err == nil && (res.RequeueAfter <= 0 || res.RequeueAfter > setupPoll) {
			res.RequeueAfter = setupPoll
		}
		return res, err
	}
	rd, probeIn, err := r.probeReadiness(ctx, sbx, l, *d.ready)
	if err != nil {
		return ctrl.Result{}, err
	}
	setReady(sbx, rd)
	res, err := r.keepAlive(ctx, sbx, l, d)
	if err == nil && probeIn > 0 && (res.RequeueAfter <= 0 || res.RequeueAfter > probeIn) {
		res.RequeueAfter = probeIn
	}
	return res, err
}

// keepAlive extends the running session by what the decision asks, warns of
// a coming shutdown, and says when to look again: the next poll, extension
// check, deadline or shutdown timer.
func (r *SandboxReconciler) keepAlive(ctx context.Context, sbx *sandboxv1.Sandbox, l lifecycle, d decision) (ctrl.Result, error) {
	st := &sbx.Status
	id := l.obs.sessionID
	k := d.keep
	key := client.ObjectKeyFromObject(sbx)
	if d.extend > 0 {
		s, err := r.api(ctx).ExtendTimeout(ctx, id, d.extend)
		switch {
		case vercel.IsGone(err), vercel.IsStopping(err), vercel.IsSnapshotting(err):
			// It stopped first: look at it again right away.
			r.forgetPoll(key)
			return ctrl.Result{RequeueAfter: minRequeue}, nil
		case vercel.IsInvalid(err):
			// Vercel's plan maximum is below --max-session-length: let the
			// session end rather than retry an extension that cannot succeed.
			r.Recorder.Eventf(sbx, nil, corev1.EventTypeWarning, sandboxv1.ReasonMaxSessionLength, "Extend",
				"Vercel refused to extend session %s (%v); the manager's --max-session-length may exceed the plan's", id, err)
			r.refused.Store(key, id)
			k = k.capped()
		case err != nil:
			return ctrl.Result{}, fmt.Errorf("extend session %s: %w", id, err)
		default:
			k.deadline = time.UnixMilli(sessionDeadline(s))
			st.ExpiresAt = msTime(sessionDeadline(s))
			logf.FromContext(ctx).V(1).Info("Extended session", "vercelName", st.VercelName, "session", id, "by", d.extend, "expiresAt", k.deadline)
			r.Recorder.Eventf(sbx, nil, corev1.EventTypeNormal, "Extended", "ExtendTimeout",
				"Extended session %s to keep it running %s past the last activity", id, k.idle)
		}
	}
	r.warnShutdown(sbx, l.shutdown, true)
	return ctrl.Result{RequeueAfter: requeueAt(l.now, l.pollAt, k.nextCheck(), l.shutdown.next)}, nil
}

// stop stops the running session, because spec.state is Stopped or the
// shutdown time has come; a persistent sandbox keeps its filesystem.
func (r *SandboxReconciler) stop(ctx context.Context, sbx *sandboxv1.Sandbox, l lifecycle, d decision) (ctrl.Result, error) {
	st := &sbx.Status
	id := l.obs.sessionID
	resp, err := r.api(ctx).StopSession(ctx, id)
	if err != nil && !vercel.IsGone(err) {
		return ctrl.Result{}, fmt.Errorf("stop session %s: %w", id, err)
	}
	logf.FromContext(ctx).Info("Stopped session", "vercelName", st.VercelName, "session", id, "reason", d.ready.reason)
	r.Recorder.Eventf(sbx, nil, corev1.EventTypeNormal, d.stopEvent, "Stop", "Stopped session %s because %s", id, d.stopWhy)
	st.StoppedAt = &metav1.Time{Time: l.now.Truncate(time.Second)}
	if resp != nil {
		if t := msTime(resp.Session.StoppedAt); t != nil {
			st.StoppedAt = t
		}
		if resp.Sandbox != nil {
			st.CurrentSnapshotID = resp.Sandbox.CurrentSnapshotID
		}
		st.Usage = foldUsage(st.Usage, usageAnswer{vercelName: st.VercelName, sandbox: resp.Sandbox, session: &resp.Session,
			snapshot: resp.Snapshot, currentSnapshotID: st.CurrentSnapshotID, now: l.now})
	}
	st.ExpiresAt = nil
	setReady(sbx, *d.ready)
	r.forgetPoll(client.ObjectKeyFromObject(sbx))
	r.ownStops.Store(client.ObjectKeyFromObject(sbx), ownStop{session: id, reason: d.ready.reason})
	if l.specChanged {
		if err := r.update(ctx, sbx, ""); err != nil {
			return ctrl.Result{}, err
		}
	}
	return ctrl.Result{RequeueAfter: d.requeue}, nil
}

// resume starts a new session from the sandbox's latest snapshot. A snapshot
// that is gone makes the Sandbox report SnapshotMissing, and it waits for a
// spec change or a requested reconcile to try again.
func (r *SandboxReconciler) resume(ctx context.Context, sbx *sandboxv1.Sandbox) (ctrl.Result, *observation, error) {
	st := &sbx.Status
	resp, err := r.api(ctx).GetSandbox(ctx, st.VercelName, true)
	if vercel.IsNotFound(err) {
		// Deleted outside the operator while it rested (a resting sandbox is
		// not polled): decide on that, as a poll that found it gone would.
		return ctrl.Result{}, &observation{state: remoteMissing, fromVercel: true}, nil
	}
	if vercel.IsSnapshotNotFound(err) && recreates(sbx.Spec.RecreatePolicy) {
		return r.recreate(ctx, sbx, sandboxv1.ReasonSnapshotMissing)
	}
	if vercel.IsSnapshotNotFound(err) {
		msg := fmt.Sprintf("Cannot resume Vercel sandbox %s: the snapshot it resumes from (%s) is gone", st.VercelName, st.CurrentSnapshotID)
		if !hasCondition(st.Conditions, sandboxv1.ConditionReady, sandboxv1.ReasonSnapshotMissing) {
			r.Recorder.Eventf(sbx, nil, corev1.EventTypeWarning, sandboxv1.ReasonSnapshotMissing, "Resume", "%s", msg)
		}
		st.ExpiresAt = nil
		setReady(sbx, readiness{sandboxv1.SandboxFailed, metav1.ConditionFalse, sandboxv1.ReasonSnapshotMissing, msg})
		setCondition(&st.Conditions, sbx.Generation, sandboxv1.ConditionResumable, metav1.ConditionFalse, sandboxv1.ReasonSnapshotMissing, msg)
		return ctrl.Result{}, nil, nil
	}
	if err != nil {
		return ctrl.Result{}, nil, fmt.Errorf("resume sandbox %s: %w", st.VercelName, err)
	}
	r.polled(sbx, r.now())
	s := resp.Session
	if s == nil || (s.Status != vercel.SessionRunning && s.Status != vercel.SessionPending) {
		return ctrl.Result{RequeueAfter: sessionStartPoll}, nil, nil
	}
	logf.FromContext(ctx).Info("Resumed Vercel sandbox", "vercelName", st.VercelName, "session", s.ID)
	r.Recorder.Eventf(sbx, nil, corev1.EventTypeNormal, "Resumed", "Resume", "Resumed Vercel sandbox %s in session %s", st.VercelName, s.ID)
	st.StoppedAt = nil
	o := record(sbx, resp, r.now())
	return ctrl.Result{}, &o, nil
}

// extensionRefused reports whether Vercel refused to extend this session of
// the Sandbox at key.
func (r *SandboxReconciler) extensionRefused(key client.ObjectKey, sessionID string) bool {
	id, ok := r.refused.Load(key)
	return ok && id == sessionID
}

// warnShutdown emits the ShutdownWarning event once per shutdownTime, when
// the shutdown will change something (a running session, or a deletion).
func (r *SandboxReconciler) warnShutdown(sbx *sandboxv1.Sandbox, sd shutdownState, running bool) {
	if !sd.warn || (!running && sbx.Spec.ShutdownPolicy != sandboxv1.ShutdownDelete) {
		return
	}
	at := sbx.Spec.ShutdownTime.Time
	if prev, ok := r.warned.Load(client.ObjectKeyFromObject(sbx)); ok && prev.(time.Time).Equal(at) {
		return
	}
	r.warned.Store(client.ObjectKeyFromObject(sbx), at)
	what := "stopped"
	switch {
	case sbx.Spec.ShutdownPolicy == sandboxv1.ShutdownDelete && sbx.Spec.DeletionPolicy == sandboxv1.DeletionPolicyRetain:
		what = "deleted, keeping its Vercel sandbox stopped (deletionPolicy Retain),"
	case sbx.Spec.ShutdownPolicy == sandboxv1.ShutdownDelete:
		what = "deleted with its Vercel sandbox"
	}
	r.Recorder.Eventf(sbx, nil, corev1.EventTypeWarning, "ShutdownWarning", "Shutdown",
		"This Sandbox will be %s at %s (spec.shutdownTime)", what, at.UTC().Format(time.RFC3339))
}

// shutdownDelete ends a Sandbox whose shutdownTime has come with policy
// Delete by deleting the object: the finalizer then treats the Vercel sandbox
// as any delete does, so it is deleted once, and kept under deletionPolicy
// Retain. A kept sandbox has its session stopped first, because a shutdown
// time promises that nothing runs (and bills) after it.
func (r *SandboxReconciler) shutdownDelete(ctx context.Context, sbx *sandboxv1.Sandbox) (ctrl.Result, error) {
	st := &sbx.Status
	if sbx.Spec.DeletionPolicy == sandboxv1.DeletionPolicyRetain && st.SessionID != "" && sessionMayRun(st.Phase) {
		if _, err := r.api(ctx).StopSession(ctx, st.SessionID); err != nil && !vercel.IsGone(err) && !vercel.IsNotFound(err) {
			return ctrl.Result{}, fmt.Errorf("stop session %s at shutdown: %w", st.SessionID, err)
		}
	}
	logf.FromContext(ctx).Info("Deleting Sandbox at shutdownTime", "vercelName", st.VercelName)
	r.Recorder.Eventf(sbx, nil, corev1.EventTypeNormal, "ShutdownDelete", "Delete", "Deleting this Sandbox because spec.shutdownTime has come (deletionPolicy %s)", sbx.Spec.DeletionPolicy)
	if err := r.Delete(ctx, sbx); err != nil && !apierrors.IsNotFound(err) {
		return ctrl.Result{}, err
	}
	return ctrl.Result{}, nil
}

// recordRetention shows in status the snapshot retention sent to Vercel
// (nil: none, a non-persistent sandbox).
func recordRetention(sbx *sandboxv1.Sandbox, rt *retention) {
	if rt == nil {
		sbx.Status.SnapshotRetention = nil
		return
	}
	r := sbx.Spec.SnapshotRetention
	sbx.Status.SnapshotRetention = &sandboxv1.SnapshotRetention{
		KeepLast: ptr.To(r.KeepLastOrDefault()), ExpireAfterSeconds: ptr.To(r.ExpireAfterSecondsOrDefault())}
}
