package controllers

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
	"github.com/getsentry/sandbox-controller/internal/vercel"
)

// reconcileCapture takes the snapshot of spec.source.sandboxRef once, as soon
// as that Sandbox runs, and afterwards only observes the snapshot. The
// session to capture is recorded in status before Vercel is asked; after a
// restart the snapshot is looked up by that session instead of being taken
// again. decideCapture (sandboxsnapshot_decide.go) chooses the step.
func (r *SandboxSnapshotReconciler) reconcileCapture(ctx context.Context, snap *sandboxv1.SandboxSnapshot) (ctrl.Result, error) {
	st := &snap.Status
	ref := snap.Spec.Source.SandboxRef
	o, err := r.observeCapture(ctx, snap)
	if err != nil {
		return ctrl.Result{}, err
	}
	act, forget := decideCapture(o)
	if forget {
		st.Capture = nil
	}
	if act == captureReadSource {
		if wait, err := r.waitForSnapshotQuota(ctx, snap); wait || err != nil {
			return ctrl.Result{RequeueAfter: quotaRecheck}, err
		}
		if err := r.observeSource(ctx, &o); err != nil {
			return ctrl.Result{}, err
		}
		act, _ = decideCapture(o)
	}
	switch act {
	case captureObserve:
		return r.observeCaptured(ctx, snap)
	case captureClassMismatch:
		setCondition(&st.Conditions, snap.Generation, sandboxv1.ConditionResolvedRefs, metav1.ConditionFalse, sandboxv1.ReasonClassMismatch, o.mismatch)
		setSnapshotReady(snap, snapPending(sandboxv1.ReasonClassMismatch, o.mismatch))
		return ctrl.Result{RequeueAfter: snapshotWaitPoll}, nil
	case captureRecord:
		return r.captured(ctx, snap, o.sbx, o.found, false)
	case captureRetry:
		return r.capture(ctx, snap, o.sbx, st.Capture.VercelName, st.Capture.SessionID, false)
	case captureSourceMissing:
		setSnapshotReady(snap, snapPending(sandboxv1.ReasonSourceNotFound, fmt.Sprintf("Sandbox %q does not exist; the capture starts once it runs", ref.Name)))
		return ctrl.Result{RequeueAfter: snapshotWaitPoll}, nil
	case captureWaitSource:
		return r.waitForSource(snap, o.sbx), nil
	case captureForeign:
		return r.foreignSource(snap, o), nil
	}
	// observeSource read the source: its sandbox is the Sandbox's own.
	return r.capture(ctx, snap, o.sbx, remoteName(o.sbx), o.source.Session.ID, true)
}

// observeCapture reads the source Sandbox and, when a capture intent is
// recorded, what Vercel did with it.
func (r *SandboxSnapshotReconciler) observeCapture(ctx context.Context, snap *sandboxv1.SandboxSnapshot) (captureObservation, error) {
	st := &snap.Status
	if st.SnapshotID != "" {
		return captureObservation{recorded: true}, nil
	}
	var o captureObservation
	sbx, err := findSandbox(ctx, r, snap.Namespace, snap.Spec.Source.SandboxRef.Name)
	if err != nil {
		return o, err
	}
	o.sbx = sbx
	if sbx != nil {
		if o.mismatch = classMismatch(ctx, sbx, "Sandbox", "spec.source.sandboxRef"); o.mismatch != "" {
			return o, nil
		}
	}
	c := st.Capture
	if c == nil || c.SessionID == "" {
		return o, nil
	}
	o.intent = true
	source, resp, err := r.intentIsSource(ctx, snap, sbx, c.VercelName)
	if err != nil || !source {
		// Not the source's sandbox: forgotten (decideCapture), never acted on.
		return o, err
	}
	if o.found, err = r.findCapture(ctx, c); err != nil || o.found != nil {
		return o, err
	}
	// The intent was recorded but Vercel never took the snapshot: asked
	// again if that session still runs, else the next one is waited for.
	o.intentRunning = resp != nil && resp.Session != nil && resp.Session.ID == c.SessionID && resp.Session.Status == vercel.SessionRunning
	return o, nil
}

// intentIsSource reads the Vercel sandbox a recorded capture intent names and
// says whether it is the source Sandbox's own (tagged with its UID), or, once
// gone, whether its name is one the source Sandbox derives. The intent is in
// status, which users with sandboxsnapshots/status may write: an intent
// naming another team's sandbox must neither have its session snapshotted
// (which stops it) nor its snapshot recorded as this object's (a Sandbox of
// the namespace could boot from it through snapshotRef). resp is the
// sandbox read when its tags were checked, which alone lets the capture be
// asked again; nil otherwise.
func (r *SandboxSnapshotReconciler) intentIsSource(ctx context.Context, snap *sandboxv1.SandboxSnapshot, sbx *sandboxv1.Sandbox, name string) (bool, *vercel.SandboxResponse, error) {
	resp, err := r.api(ctx).GetSandbox(ctx, name, false)
	switch {
	case err != nil && !vercel.IsNotFound(err):
		return false, nil, fmt.Errorf("get sandbox %s: %w", name, err)
	case err == nil && sbx != nil:
		return ownerOf(resp.Sandbox.Tags, r.ClusterID, sbx.UID) == ownedBySelf, resp, nil
	}
	// Gone, or its Sandbox is: only a name the Sandbox derives may be
	// looked up (read only), as snapshotIsOurs does.
	p := capturePattern(snap.Namespace, snap.Spec.Source.SandboxRef.Name)
	return p != nil && p.MatchString(name), nil, nil
}

// observeSource reads the Vercel sandbox the source Sandbox stands for. The
// Sandbox's status names the session; Vercel confirms that it is a session
// of the sandbox this Sandbox stands for, so that a written status cannot
// have another team's sandbox captured.
func (r *SandboxSnapshotReconciler) observeSource(ctx context.Context, o *captureObservation) error {
	name := remoteName(o.sbx)
	resp, err := r.api(ctx).GetSandbox(ctx, name, false)
	switch {
	case vercel.IsNotFound(err):
	case err != nil:
		return fmt.Errorf("get sandbox %s: %w", name, err)
	default:
		o.source, o.owner = resp, ownerOf(resp.Sandbox.Tags, r.ClusterID, o.sbx.UID)
	}
	o.sourceRead = true
	return nil
}

// observeCaptured observes the recorded snapshot, after retrying a resume
// that failed after the capture.
func (r *SandboxSnapshotReconciler) observeCaptured(ctx context.Context, snap *sandboxv1.SandboxSnapshot) (ctrl.Result, error) {
	resumed, err := r.resumeSource(ctx, snap)
	if err != nil {
		return ctrl.Result{}, err
	}
	if resumed {
		sbx, err := findSandbox(ctx, r, snap.Namespace, snap.Spec.Source.SandboxRef.Name)
		if err != nil {
			return ctrl.Result{}, err
		}
		if sbx != nil {
			if err := r.requestSandboxReconcile(ctx, sbx); err != nil {
				return ctrl.Result{}, err
			}
		}
	}
	return r.observe(ctx, snap, snap.Status.SnapshotID)
}

// foreignSource reports a source whose Vercel sandbox is not the Sandbox's.
func (r *SandboxSnapshotReconciler) foreignSource(snap *sandboxv1.SandboxSnapshot, o captureObservation) ctrl.Result {
	name := remoteName(o.sbx)
	msg := fmt.Sprintf("Vercel sandbox %s is not Sandbox %q's (%s); it is not captured", name, o.sbx.Name, describeOwner(o.source.Sandbox.Tags, r.ClusterID))
	if !hasCondition(snap.Status.Conditions, sandboxv1.ConditionReady, sandboxv1.ReasonOwnedElsewhere) {
		r.Recorder.Eventf(snap, nil, corev1.EventTypeWarning, sandboxv1.ReasonOwnedElsewhere, "Capture", "%s", msg)
	}
	setSnapshotReady(snap, snapPending(sandboxv1.ReasonOwnedElsewhere, msg))
	return ctrl.Result{RequeueAfter: snapshotWaitPoll}
}

// waitForSource reports why the Sandbox to capture does not run, so a capture
// never waits silently (sourceWait). The capture is looked at again whenever
// the Sandbox changes, so one that recovers is still captured.
func (r *SandboxSnapshotReconciler) waitForSource(snap *sandboxv1.SandboxSnapshot, sbx *sandboxv1.Sandbox) ctrl.Result {
	rd := sourceWait(sbx)
	if rd.phase == sandboxv1.SnapshotFailed {
		if snap.Status.Phase != sandboxv1.SnapshotFailed {
			r.Recorder.Eventf(snap, nil, corev1.EventTypeWarning, sandboxv1.ReasonSourceFailed, "Capture", "%s", truncate(rd.message, maxEventNote))
		}
		setSnapshotReady(snap, rd)
		// Woken by the Sandbox's changes; no timer.
		return ctrl.Result{}
	}
	setSnapshotReady(snap, rd)
	return ctrl.Result{RequeueAfter: snapshotWaitPoll}
}

// capture records the intent, then asks Vercel to snapshot the session.
// proven says that a read of this reconcile showed the session's sandbox to
// be the source Sandbox's own.
func (r *SandboxSnapshotReconciler) capture(ctx context.Context, snap *sandboxv1.SandboxSnapshot, sbx *sandboxv1.Sandbox, vercelName, sessionID string, proven bool) (ctrl.Result, error) {
	now := metav1.NewTime(r.now().Truncate(time.Second))
	if err := r.patchStatusNow(ctx, snap, func(st *sandboxv1.SandboxSnapshotStatus) {
		if st.Capture == nil || st.Capture.SessionID != sessionID {
			st.Capture = &sandboxv1.SnapshotCaptureStatus{VercelName: vercelName, SessionID: sessionID, RequestedAt: &now}
			st.SourceSpec = nil
		}
		// Frozen with the intent: a fork of this snapshot gives its children
		// this spec, not the Sandbox's later one.
		if st.SourceSpec == nil && sbx != nil {
			st.SourceSpec = sourceSpecOf(sbx)
		}
		setSnapshotReady(snap, snapReadiness{sandboxv1.SnapshotCapturing, metav1.ConditionFalse, sandboxv1.ReasonCapturing,
			fmt.Sprintf("Capturing session %s of Vercel sandbox %s", sessionID, vercelName)})
	}); err != nil {
		return ctrl.Result{}, err
	}
	resp, err := r.api(ctx).CreateSnapshot(ctx, sessionID, snapshotExpiration(snap))
	switch {
	case vercel.IsSnapshotting(err) || vercel.IsStopping(err):
		return ctrl.Result{RequeueAfter: snapshotBuildPoll}, nil
	case vercel.IsGone(err) || vercel.IsSessionStopped(err):
		// The session stopped before the snapshot was taken; wait for the
		// Sandbox to run again.
		snap.Status.Capture = nil
		setSnapshotReady(snap, snapPending(sandboxv1.ReasonSourceNotRunning,
			fmt.Sprintf("Session %s stopped before it could be captured; waiting for Sandbox %q to run again", sessionID, snap.Spec.Source.SandboxRef.Name)))
		return ctrl.Result{RequeueAfter: snapshotWaitPoll}, nil
	case err != nil:
		return ctrl.Result{}, fmt.Errorf("snapshot session %s: %w", sessionID, err)
	}
	logf.FromContext(ctx).Info("Created Vercel snapshot", "snapshot", resp.Snapshot.ID, "session", sessionID)
	r.Recorder.Eventf(snap, nil, corev1.EventTypeNormal, "SnapshotCreated", "CreateSnapshot",
		"Captured session %s of Vercel sandbox %s as snapshot %s; Vercel stopped the session", sessionID, vercelName, resp.Snapshot.ID)
	return r.captured(ctx, snap, sbx, &resp.Snapshot, proven)
}

// captured records the snapshot with its proof (read again unless proven),
// resumes the source when asked, and makes the Sandbox look at Vercel again
// (its session stopped, maybe resumed).
func (r *SandboxSnapshotReconciler) captured(ctx context.Context, snap *sandboxv1.SandboxSnapshot, sbx *sandboxv1.Sandbox, s *vercel.Snapshot, proven bool) (ctrl.Result, error) {
	snap.Status.SnapshotID = s.ID
	if proven {
		r.prove(snap, s.ID)
	} else if err := r.proveCapture(ctx, snap, sbx, s); err != nil {
		// Recorded without a proof: the name check still applies later.
		logf.FromContext(ctx).Info("Could not read the source of a capture to record its proof", "snapshot", s.ID, "error", err.Error())
	}
	r.markReady(snap, s)
	if _, err := r.resumeSource(ctx, snap); err != nil {
		return ctrl.Result{}, err
	}
	// One request for both: the Sandbox sees the stop and the resume.
	if sbx != nil {
		if err := r.requestSandboxReconcile(ctx, sbx); err != nil {
			return ctrl.Result{}, err
		}
	}
	return ctrl.Result{RequeueAfter: r.nextObservation(s)}, nil
}

// resumeSource starts a new session of the captured sandbox once, with
// spec.keepSourceRunning, and reports whether it did; the caller asks the
// Sandbox to look at Vercel again. A resume of a sandbox that already runs
// returns its session, so a repeat after a restart is harmless.
func (r *SandboxSnapshotReconciler) resumeSource(ctx context.Context, snap *sandboxv1.SandboxSnapshot) (bool, error) {
	c := snap.Status.Capture
	if !snap.Spec.KeepSourceRunning || c == nil || c.VercelName == "" || c.ResumedSessionID != "" {
		return false, nil
	}
	resp, err := r.api(ctx).GetSandbox(ctx, c.VercelName, true)
	if err != nil {
		return false, fmt.Errorf("resume sandbox %s after the capture: %w", c.VercelName, err)
	}
	c.ResumedSessionID = sessionID(resp)
	r.Recorder.Eventf(snap, nil, corev1.EventTypeNormal, "Resumed", "Resume",
		"Resumed Vercel sandbox %s in session %s after the capture (keepSourceRunning)", c.VercelName, c.ResumedSessionID)
	return true, nil
}

// findCapture looks for the snapshot taken of the recorded session.
func (r *SandboxSnapshotReconciler) findCapture(ctx context.Context, c *sandboxv1.SnapshotCaptureStatus) (*vercel.Snapshot, error) {
	snaps, err := r.api(ctx).ListAllSnapshots(ctx, vercel.ListSnapshotsOptions{Name: c.VercelName})
	if err != nil {
		return nil, fmt.Errorf("list snapshots of %s: %w", c.VercelName, err)
	}
	for i := range snaps {
		s := &snaps[i]
		// A stop of a persistent sandbox also snapshots the session
		// ("automatic"); only a manual one is the capture.
		if s.SourceSessionID == c.SessionID && s.CreationMethod != "automatic" {
			return s, nil
		}
	}
	return nil, nil
}

// requestSandboxReconcile sets the Sandbox's reconcile-requested-at
// annotation, which makes its controller observe Vercel again at once.
func (r *SandboxSnapshotReconciler) requestSandboxReconcile(ctx context.Context, sbx *sandboxv1.Sandbox) error {
	patch := client.MergeFrom(sbx.DeepCopy())
	if sbx.Annotations == nil {
		sbx.Annotations = map[string]string{}
	}
	sbx.Annotations[sandboxv1.AnnotationReconcileRequestedAt] = r.now().UTC().Format(time.RFC3339Nano)
	// A Sandbox deleted meanwhile has nothing left to notice.
	if err := client.IgnoreNotFound(r.Patch(ctx, sbx, patch)); err != nil {
		return fmt.Errorf("annotate Sandbox %s: %w", sbx.Name, err)
	}
	return nil
}

// unrecordedCapture resolves a recorded capture intent when no snapshot id
// was recorded: the snapshot Vercel took of the session (the answer was lost,
// or the manager stopped before writing it), else none. It asks to wait while
// Vercel is still taking it.
func (r *SandboxSnapshotReconciler) unrecordedCapture(ctx context.Context, c *sandboxv1.SnapshotCaptureStatus) (id string, wait bool, err error) {
	found, err := r.findCapture(ctx, c)
	if err != nil {
		return "", false, err
	}
	if found != nil {
		return found.ID, false, nil
	}
	resp, err := r.api(ctx).GetSandbox(ctx, c.VercelName, false)
	switch {
	case vercel.IsNotFound(err):
		return "", false, nil
	case err != nil:
		return "", false, fmt.Errorf("get sandbox %s: %w", c.VercelName, err)
	}
	s := resp.Session
	return "", s != nil && s.ID == c.SessionID && s.Status == vercel.SessionSnapshotting, nil
}

// releaseSource makes sure the source Sandbox no longer needs the captured
// snapshot id before it is deleted. A capture stops the session, and Vercel
// resumes a persistent sandbox from its latest snapshot: the capture, until
// a later session stops. Deleting it then would leave the Sandbox unable to
// ever run again (SnapshotMissing). So a source that would resume from it is
// resumed first — the filesystem moves into a running session, whose next
// stop snapshots it again — and its Sandbox asked to look at Vercel, which
// stops it again if it is paused. It returns why the delete must wait, or
// "" when the snapshot can go.
func (r *SandboxSnapshotReconciler) releaseSource(ctx context.Context, snap *sandboxv1.SandboxSnapshot, id string) (string, error) {
	c := snap.Status.Capture
	if c == nil || c.VercelName == "" {
		return "", nil
	}
	sbx, err := findSandbox(ctx, r, snap.Namespace, snap.Spec.Source.SandboxRef.Name)
	if err != nil {
		return "", err
	}
	if sbx == nil || !sbx.DeletionTimestamp.IsZero() || sbx.Status.VercelName != c.VercelName {
		// No Sandbox will run that Vercel sandbox again.
		return "", nil
	}
	resp, err := r.api(ctx).GetSandbox(ctx, c.VercelName, false)
	switch {
	case vercel.IsNotFound(err):
		return "", nil
	case err != nil:
		return "", fmt.Errorf("get sandbox %s: %w", c.VercelName, err)
	}
	switch decideRelease(resp, id) {
	case releaseFree:
		return "", nil
	case releaseWait:
		s := resp.Session
		return fmt.Sprintf("Waiting for session %s of Vercel sandbox %s (Sandbox %q) to settle: it would resume from snapshot %s",
			s.ID, c.VercelName, sbx.Name, id), nil
	}
	return r.resumeToRelease(ctx, snap, sbx, id)
}

// resumeToRelease resumes the source's Vercel sandbox, whose next stop
// snapshots its filesystem again, and asks its Sandbox to look at Vercel.
func (r *SandboxSnapshotReconciler) resumeToRelease(ctx context.Context, snap *sandboxv1.SandboxSnapshot, sbx *sandboxv1.Sandbox, id string) (string, error) {
	c := snap.Status.Capture
	resp, err := r.api(ctx).GetSandbox(ctx, c.VercelName, true)
	switch {
	case vercel.IsNotFound(err) || vercel.IsSnapshotNotFound(err):
		return "", nil
	case err != nil:
		return "", fmt.Errorf("resume sandbox %s before deleting snapshot %s, which it would resume from: %w", c.VercelName, id, err)
	}
	r.Recorder.Eventf(snap, nil, corev1.EventTypeNormal, "Resumed", "Delete",
		"Resumed Vercel sandbox %s in session %s before deleting snapshot %s: Sandbox %s would resume from it", c.VercelName, sessionID(resp), id, sbx.Name)
	if err := r.requestSandboxReconcile(ctx, sbx); err != nil {
		return "", err
	}
	return fmt.Sprintf("Resumed Vercel sandbox %s (Sandbox %q) in session %s, which restores snapshot %s; deleting the snapshot once it runs",
		c.VercelName, sbx.Name, sessionID(resp), id), nil
}
