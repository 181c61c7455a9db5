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
// again.
func (r *SandboxSnapshotReconciler) reconcileCapture(ctx context.Context, snap *sandboxv1.SandboxSnapshot) (ctrl.Result, error) {
	st := &snap.Status
	ref := snap.Spec.Source.SandboxRef
	if st.SnapshotID != "" {
		// A resume that failed after the capture is retried here.
		resumed, err := r.resumeSource(ctx, snap)
		if err != nil {
			return ctrl.Result{}, err
		}
		if resumed {
			sbx, err := findSandbox(ctx, r, snap.Namespace, ref.Name)
			if err != nil {
				return ctrl.Result{}, err
			}
			if sbx != nil {
				if err := r.requestSandboxReconcile(ctx, sbx); err != nil {
					return ctrl.Result{}, err
				}
			}
		}
		return r.observe(ctx, snap, st.SnapshotID)
	}
	sbx, err := findSandbox(ctx, r, snap.Namespace, ref.Name)
	if err != nil {
		return ctrl.Result{}, err
	}
	if sbx != nil {
		if msg := classMismatch(ctx, sbx, "Sandbox", "spec.source.sandboxRef"); msg != "" {
			st.Phase = sandboxv1.SnapshotPending
			setCondition(&st.Conditions, snap.Generation, sandboxv1.ConditionResolvedRefs, metav1.ConditionFalse, sandboxv1.ReasonClassMismatch, msg)
			setCondition(&st.Conditions, snap.Generation, sandboxv1.ConditionReady, metav1.ConditionFalse, sandboxv1.ReasonClassMismatch, msg)
			return ctrl.Result{RequeueAfter: snapshotWaitPoll}, nil
		}
	}
	if c := st.Capture; c != nil && c.SessionID != "" {
		found, err := r.findCapture(ctx, c)
		if err != nil {
			return ctrl.Result{}, err
		}
		if found != nil {
			return r.captured(ctx, snap, sbx, found)
		}
		// The intent was recorded but Vercel never took the snapshot: ask
		// again if that session still runs, else wait for the next one.
		resp, err := r.api(ctx).GetSandbox(ctx, c.VercelName, false)
		if err != nil && !vercel.IsNotFound(err) {
			return ctrl.Result{}, fmt.Errorf("get sandbox %s: %w", c.VercelName, err)
		}
		if err == nil && resp.Session != nil && resp.Session.ID == c.SessionID && resp.Session.Status == vercel.SessionRunning {
			return r.capture(ctx, snap, sbx, c.VercelName, c.SessionID)
		}
		st.Capture = nil
	}
	switch {
	case sbx == nil:
		st.Phase = sandboxv1.SnapshotPending
		setCondition(&st.Conditions, snap.Generation, sandboxv1.ConditionReady, metav1.ConditionFalse, sandboxv1.ReasonSourceNotFound,
			fmt.Sprintf("Sandbox %q does not exist; the capture starts once it runs", ref.Name))
		return ctrl.Result{RequeueAfter: snapshotWaitPoll}, nil
	case sbx.Status.Phase != sandboxv1.SandboxRunning || sbx.Status.SessionID == "" || sbx.Status.VercelName == "":
		return r.waitForSource(snap, sbx), nil
	}
	if wait, err := r.waitForSnapshotQuota(ctx, snap); wait || err != nil {
		return ctrl.Result{RequeueAfter: quotaRecheck}, err
	}
	// The Sandbox's status names the session; Vercel confirms that it is a
	// session of the sandbox this Sandbox stands for, so that a written
	// status cannot have another team's sandbox captured.
	name := remoteName(sbx)
	resp, err := r.api(ctx).GetSandbox(ctx, name, false)
	switch {
	case vercel.IsNotFound(err):
		return r.waitForSource(snap, sbx), nil
	case err != nil:
		return ctrl.Result{}, fmt.Errorf("get sandbox %s: %w", name, err)
	}
	if o := ownerOf(resp.Sandbox.Tags, r.ClusterID, sbx.UID); o != ownedBySelf {
		msg := fmt.Sprintf("Vercel sandbox %s is not Sandbox %q's (%s); it is not captured", name, sbx.Name, describeOwner(resp.Sandbox.Tags, r.ClusterID))
		if !hasCondition(st.Conditions, sandboxv1.ConditionReady, sandboxv1.ReasonOwnedElsewhere) {
			r.Recorder.Eventf(snap, nil, corev1.EventTypeWarning, sandboxv1.ReasonOwnedElsewhere, "Capture", "%s", msg)
		}
		st.Phase = sandboxv1.SnapshotPending
		setCondition(&st.Conditions, snap.Generation, sandboxv1.ConditionReady, metav1.ConditionFalse, sandboxv1.ReasonOwnedElsewhere, msg)
		return ctrl.Result{RequeueAfter: snapshotWaitPoll}, nil
	}
	s := resp.Session
	if s == nil || s.Status != vercel.SessionRunning {
		return r.waitForSource(snap, sbx), nil
	}
	return r.capture(ctx, snap, sbx, name, s.ID)
}

// waitForSource reports why the Sandbox to capture does not run, so a capture
// never waits silently: Failed (reason SourceFailed) while the source cannot
// run again — it failed, or it stopped and is not persistent — else Pending
// with what would make it run. The capture is looked at again whenever the
// Sandbox changes, so one that recovers is still captured.
func (r *SandboxSnapshotReconciler) waitForSource(snap *sandboxv1.SandboxSnapshot, sbx *sandboxv1.Sandbox) ctrl.Result {
	st := &snap.Status
	name := sbx.Name
	why := readyMessage(sbx.Status.Conditions)
	notPersistent := sbx.Spec.Persistent != nil && !*sbx.Spec.Persistent
	var msg string
	switch {
	case sbx.Status.Phase == sandboxv1.SandboxFailed:
		msg = fmt.Sprintf("Sandbox %q failed (%s); it cannot be captured unless it runs again", name, why)
	case sbx.Status.Phase == sandboxv1.SandboxStopped && notPersistent && sbx.Status.SessionID != "":
		msg = fmt.Sprintf("Sandbox %q stopped and is not persistent, so it cannot run again to be captured (%s)", name, why)
	}
	if msg != "" {
		if st.Phase != sandboxv1.SnapshotFailed {
			r.Recorder.Eventf(snap, nil, corev1.EventTypeWarning, sandboxv1.ReasonSourceFailed, "Capture", "%s", truncate(msg, maxEventNote))
		}
		st.Phase, st.ReadyToUse = sandboxv1.SnapshotFailed, false
		setCondition(&st.Conditions, snap.Generation, sandboxv1.ConditionReady, metav1.ConditionFalse, sandboxv1.ReasonSourceFailed, msg)
		// Woken by the Sandbox's changes; no timer.
		return ctrl.Result{}
	}
	switch {
	case sbx.Spec.State == sandboxv1.SandboxStateStopped:
		msg = fmt.Sprintf("Waiting for Sandbox %q to be running before capturing it: it is paused (spec.state Stopped)", name)
	case sbx.Status.Phase == sandboxv1.SandboxStopped:
		msg = fmt.Sprintf("Waiting for Sandbox %q to be running before capturing it: it is stopped (%s)", name, why)
	default:
		phase := string(sbx.Status.Phase)
		if phase == "" {
			phase = "not started"
		}
		msg = fmt.Sprintf("Waiting for Sandbox %q to be running (phase %s) before capturing it", name, phase)
	}
	st.Phase = sandboxv1.SnapshotPending
	setCondition(&st.Conditions, snap.Generation, sandboxv1.ConditionReady, metav1.ConditionFalse, sandboxv1.ReasonSourceNotRunning, msg)
	return ctrl.Result{RequeueAfter: snapshotWaitPoll}
}

// capture records the intent, then asks Vercel to snapshot the session.
func (r *SandboxSnapshotReconciler) capture(ctx context.Context, snap *sandboxv1.SandboxSnapshot, sbx *sandboxv1.Sandbox, vercelName, sessionID string) (ctrl.Result, error) {
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
		st.Phase = sandboxv1.SnapshotCapturing
		setCondition(&st.Conditions, snap.Generation, sandboxv1.ConditionReady, metav1.ConditionFalse, sandboxv1.ReasonCapturing,
			fmt.Sprintf("Capturing session %s of Vercel sandbox %s", sessionID, vercelName))
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
		snap.Status.Phase = sandboxv1.SnapshotPending
		setCondition(&snap.Status.Conditions, snap.Generation, sandboxv1.ConditionReady, metav1.ConditionFalse, sandboxv1.ReasonSourceNotRunning,
			fmt.Sprintf("Session %s stopped before it could be captured; waiting for Sandbox %q to run again", sessionID, snap.Spec.Source.SandboxRef.Name))
		return ctrl.Result{RequeueAfter: snapshotWaitPoll}, nil
	case err != nil:
		return ctrl.Result{}, fmt.Errorf("snapshot session %s: %w", sessionID, err)
	}
	logf.FromContext(ctx).Info("Created Vercel snapshot", "snapshot", resp.Snapshot.ID, "session", sessionID)
	r.Recorder.Eventf(snap, nil, corev1.EventTypeNormal, "SnapshotCreated", "CreateSnapshot",
		"Captured session %s of Vercel sandbox %s as snapshot %s; Vercel stopped the session", sessionID, vercelName, resp.Snapshot.ID)
	return r.captured(ctx, snap, sbx, &resp.Snapshot)
}

// captured records the snapshot, resumes the source when asked, and makes the
// Sandbox look at Vercel again (its session stopped, maybe resumed).
func (r *SandboxSnapshotReconciler) captured(ctx context.Context, snap *sandboxv1.SandboxSnapshot, sbx *sandboxv1.Sandbox, s *vercel.Snapshot) (ctrl.Result, error) {
	snap.Status.SnapshotID = s.ID
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
	if !resp.Sandbox.Persistent || resp.Sandbox.CurrentSnapshotID != id {
		return "", nil
	}
	if s := resp.Session; s != nil {
		switch s.Status {
		case vercel.SessionRunning:
			// The filesystem lives in the session now.
			return "", nil
		case vercel.SessionPending, vercel.SessionStopping, vercel.SessionSnapshotting:
			return fmt.Sprintf("Waiting for session %s of Vercel sandbox %s (Sandbox %q) to settle: it would resume from snapshot %s",
				s.ID, c.VercelName, sbx.Name, id), nil
		case vercel.SessionFailed, vercel.SessionAborted:
			if s.SourceSnapshotID == id {
				// A session restored from it failed: resuming again would
				// loop, and the snapshot did not help.
				return "", nil
			}
		}
	}
	resp, err = r.api(ctx).GetSandbox(ctx, c.VercelName, true)
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
