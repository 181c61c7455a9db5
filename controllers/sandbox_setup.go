package controllers

// The setup phase: spec.setup commands run one by one, detached, and are
// polled until each exits. Setup belongs to the filesystem, not to a session:
// a persistent sandbox keeps its filesystem when a session stops, so setup
// that succeeded stays done in every later session, setup that failed keeps
// every later session from being Ready, and a step that a stop cut off runs
// again in the next session. status.setup records which.

import (
	"context"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
	"github.com/getsentry/sandbox-controller/internal/vercel"
)

// setupProgress is where setup stands after a step of runSetup.
type setupProgress int

const (
	// setupDone: every setup command has succeeded on this filesystem (or
	// there are none); the session may be Ready.
	setupDone setupProgress = iota
	// setupRunning: a setup command runs now; Ready is False (SettingUp).
	setupRunning
	// setupFailed: a setup command failed on this filesystem; Ready is False
	// (SetupFailed) until spec.setup changes.
	setupFailed
)

// runSetup advances spec.setup in session sessionID by at most one command
// per step: it polls the running command, or starts the next one. Commands
// run detached and are polled, so no worker waits for them. The running
// command's id is kept in status; after a crash that lost it, the command is
// found again in the session by the marker it was started with, never by its
// place in the session's command list, which clients add to as well.
func (r *SandboxReconciler) runSetup(ctx context.Context, sbx *sandboxv1.Sandbox, sessionID string) (setupProgress, error) {
	steps := sbx.Spec.Setup
	hash := setupHash(steps)
	st := sbx.Status.Setup
	if st == nil {
		if len(steps) == 0 {
			return setupDone, nil
		}
		st = &sandboxv1.SetupStatus{State: sandboxv1.SetupRunning, SpecHash: hash, Attempt: 1}
		sbx.Status.Setup = st
	}
	if st.State == "" {
		// Recorded before setup had a state: a failure was in Ready only.
		st.State, st.SpecHash = sandboxv1.SetupRunning, hash
		if hasCondition(sbx.Status.Conditions, sandboxv1.ConditionReady, sandboxv1.ReasonSetupFailed) {
			st.State = sandboxv1.SetupFailed
		}
	}
	switch {
	case st.State == sandboxv1.SetupSucceeded:
		return setupDone, nil
	case st.State == sandboxv1.SetupFailed && st.SpecHash != hash:
		// A changed spec.setup is the way to run setup again after a
		// failure: from its first command, on the filesystem as it is.
		logf.FromContext(ctx).Info("Running setup again after spec.setup changed", "vercelName", sbx.Status.VercelName, "attempt", st.Attempt+1)
		*st = sandboxv1.SetupStatus{State: sandboxv1.SetupRunning, SpecHash: hash, Attempt: st.Attempt + 1}
	case st.State == sandboxv1.SetupFailed:
		if !hasCondition(sbx.Status.Conditions, sandboxv1.ConditionReady, sandboxv1.ReasonSetupFailed) {
			// A later session (resume, wake) on the same half-set-up filesystem.
			setReady(sbx, readiness{sandboxv1.SandboxFailed, metav1.ConditionFalse, sandboxv1.ReasonSetupFailed,
				fmt.Sprintf("Setup step %d (%s) failed in session %s, so this filesystem is only partly set up; change spec.setup to run setup again, or delete and re-create this Sandbox",
					st.Completed+1, failedStepName(steps, st.Completed), st.SessionID)})
		}
		return setupFailed, nil
	}
	// While setup runs, a spec.setup change applies from the next command.
	st.SpecHash = hash
	for int(st.Completed) < len(steps) {
		step := steps[st.Completed]
		if st.CommandID != "" && st.SessionID != sessionID {
			// The session running the step stopped before it exited (a
			// pause, a shutdown): the step runs again in this session.
			st.CommandID = ""
		}
		st.SessionID = sessionID
		if st.CommandID == "" {
			id, err := r.startSetupCommand(ctx, sbx, sessionID, step)
			if err != nil {
				return setupRunning, err
			}
			st.CommandID = id
		}
		cmd, err := r.api(ctx).GetCommand(ctx, sessionID, st.CommandID, false)
		if err != nil {
			return setupRunning, fmt.Errorf("get setup command %s: %w", st.CommandID, err)
		}
		if cmd.ExitCode == nil {
			setReady(sbx, readiness{sandboxv1.SandboxSettingUp, metav1.ConditionFalse, sandboxv1.ReasonSettingUp,
				fmt.Sprintf("Running setup step %d of %d (%s)", st.Completed+1, len(steps), stepName(step))})
			return setupRunning, nil
		}
		if *cmd.ExitCode != 0 {
			return setupFailed, r.reportSetupFailed(ctx, sbx, sessionID, step, cmd)
		}
		st.Completed++
		st.CommandID = ""
	}
	st.State = sandboxv1.SetupSucceeded
	return setupDone, nil
}

// startSetupCommand starts the current setup step in the session, or finds
// it there when it was started before a crash kept its id from status.
func (r *SandboxReconciler) startSetupCommand(ctx context.Context, sbx *sandboxv1.Sandbox, sessionID string, step sandboxv1.SetupCommand) (string, error) {
	st := sbx.Status.Setup
	marker := setupMarker(st.Attempt, st.Completed+1)
	cmds, err := r.api(ctx).ListCommands(ctx, sessionID)
	if err != nil {
		return "", fmt.Errorf("list commands of session %s: %w", sessionID, err)
	}
	for _, c := range cmds {
		if isSetupCommand(c, marker) {
			return c.ID, nil
		}
	}
	cmd, err := r.api(ctx).RunCommand(ctx, sessionID, setupRequest(step, marker))
	if err != nil {
		return "", fmt.Errorf("run setup step %d (%s): %w", st.Completed+1, stepName(step), err)
	}
	r.Recorder.Eventf(sbx, nil, corev1.EventTypeNormal, "SetupStarted", "RunCommand", "Started setup step %d (%s)", st.Completed+1, stepName(step))
	return cmd.ID, nil
}

// setupExec runs a setup command with the marker as $0: the shell replaces
// itself with the command (resolved through PATH, with its arguments, cwd,
// environment, exit code and timeout unchanged), and the session's command
// list shows the marker among the arguments. Vercel's list reports neither
// environment nor any label of a command, only its argv and cwd.
const setupExec = `exec "$@"`

// setupMarker names one setup step of one setup attempt; it is unique within
// a session, because a session runs each step of an attempt at most once.
func setupMarker(attempt, step int32) string {
	return fmt.Sprintf("sandbox-setup:attempt=%d:step=%d", attempt, step)
}

// setupRequest is the run-command request for a setup step.
func setupRequest(step sandboxv1.SetupCommand, marker string) vercel.RunCommandRequest {
	args := append([]string{"-c", setupExec, marker, step.Command}, step.Args...)
	req := vercel.RunCommandRequest{Command: "sh", Args: args, Cwd: step.Cwd, Env: map[string]string{}, Sudo: step.Sudo}
	if step.TimeoutSeconds != nil {
		req.Timeout = int64(*step.TimeoutSeconds) * 1000
	}
	return req
}

// isSetupCommand reports whether a command of the session is the setup step
// the marker names.
func isSetupCommand(c vercel.Command, marker string) bool {
	return c.Name == "sh" && len(c.Args) >= 4 && c.Args[0] == "-c" && c.Args[1] == setupExec && c.Args[2] == marker
}

// setupHash identifies a spec.setup.
func setupHash(steps []sandboxv1.SetupCommand) string {
	if len(steps) == 0 {
		return ""
	}
	b, _ := json.Marshal(steps)
	return shortHash(string(b), 16)
}

func (r *SandboxReconciler) reportSetupFailed(ctx context.Context, sbx *sandboxv1.Sandbox, sessionID string, step sandboxv1.SetupCommand, cmd *vercel.Command) error {
	st := &sbx.Status
	// The output is scrubbed of every Secret value the command may have
	// echoed (knownSecrets: the current ones and those sent before a rotation).
	values := r.knownSecrets(ctx, sbx)
	tail, err := commandOutputTail(ctx, r.api(ctx), sessionID, cmd.ID, values)
	if err != nil {
		return fmt.Errorf("read output of setup command %s: %w", cmd.ID, err)
	}
	msg := fmt.Sprintf("Setup step %d (%s) exited with code %d", st.Setup.Completed+1, stepName(step), *cmd.ExitCode)
	if tail != "" {
		msg += ": " + tail
	}
	msg = scrub(msg, values)
	st.Setup.State = sandboxv1.SetupFailed
	setReady(sbx, readiness{sandboxv1.SandboxFailed, metav1.ConditionFalse, sandboxv1.ReasonSetupFailed, msg})
	r.Recorder.Eventf(sbx, nil, corev1.EventTypeWarning, sandboxv1.ReasonSetupFailed, "RunCommand", "%s", truncate(msg, maxEventNote))
	return nil
}

func stepName(s sandboxv1.SetupCommand) string {
	if s.Name != "" {
		return s.Name
	}
	return s.Command
}

// failedStepName names the step a failure recorded, which the spec may no
// longer have.
func failedStepName(steps []sandboxv1.SetupCommand, completed int32) string {
	if int(completed) < len(steps) {
		return stepName(steps[completed])
	}
	return "removed"
}
