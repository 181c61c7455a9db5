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
	"maps"
	"slices"

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

// runSetup advances spec.setup in session sessionID: it polls the running
// command, or starts the next one, through the step runner (steps.go), whose
// marker finds a command started before a crash lost its id.
func (r *SandboxReconciler) runSetup(ctx context.Context, sbx *sandboxv1.Sandbox, sessionID string) (setupProgress, error) {
	steps := sbx.Spec.Setup
	st, progress, done := r.setupState(ctx, sbx)
	if done {
		return progress, nil
	}
	// While setup runs, a spec.setup change applies from the next command.
	st.SpecHash = setupHash(steps)
	run := stepRun{
		api:     r.api(ctx),
		session: sessionID,
		n:       len(steps),
		marker:  func(i int) string { return setupMarker(st.Attempt, int32(i)+1) },
		request: func(_ context.Context, i int) (vercel.RunCommandRequest, []string, error) {
			return setupCommand(steps[i]), nil, nil
		},
		label: func(i int) string { return fmt.Sprintf("setup step %d (%s)", i+1, stepName(steps[i])) },
		started: func(i int, _ *vercel.Command) {
			r.Recorder.Eventf(sbx, nil, corev1.EventTypeNormal, "SetupStarted", "RunCommand", "Started setup step %d (%s)", i+1, stepName(steps[i]))
		},
	}
	cur := stepCursor{completed: int(st.Completed), commandID: st.CommandID, session: st.SessionID}
	res, err := run.advance(ctx, &cur)
	st.Completed, st.CommandID, st.SessionID = int32(cur.completed), cur.commandID, cur.session
	switch {
	case err != nil:
		return setupRunning, err
	case res.state == stepRunning:
		setReady(sbx, readiness{sandboxv1.SandboxSettingUp, metav1.ConditionFalse, sandboxv1.ReasonSettingUp,
			fmt.Sprintf("Running setup step %d of %d (%s)", st.Completed+1, len(steps), stepName(steps[st.Completed]))})
		return setupRunning, nil
	case res.state == stepFailed:
		return setupFailed, r.reportSetupFailed(ctx, sbx, sessionID, steps[st.Completed], res.cmd)
	}
	st.State = sandboxv1.SetupSucceeded
	return setupDone, nil
}

// setupState is status.setup made current for the spec: started for a
// spec.setup never run, restarted for one changed after a failure. done
// reports that there is nothing to run, with the progress to return.
func (r *SandboxReconciler) setupState(ctx context.Context, sbx *sandboxv1.Sandbox) (*sandboxv1.SetupStatus, setupProgress, bool) {
	steps := sbx.Spec.Setup
	hash := setupHash(steps)
	st := sbx.Status.Setup
	if st == nil {
		if len(steps) == 0 {
			return nil, setupDone, true
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
		return st, setupDone, true
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
		return st, setupFailed, true
	}
	return st, setupRunning, false
}

// setupMarker names one setup step of one setup attempt; it is unique within
// a session, because a session runs each step of an attempt at most once.
func setupMarker(attempt, step int32) string {
	return fmt.Sprintf("sandbox-setup:attempt=%d:step=%d", attempt, step)
}

// setupCommand is the run-command request for a setup step, unmarked.
func setupCommand(step sandboxv1.SetupCommand) vercel.RunCommandRequest {
	req := vercel.RunCommandRequest{Command: step.Command, Args: step.Args, Cwd: step.Cwd, Env: map[string]string{}, Sudo: step.Sudo}
	if step.TimeoutSeconds != nil {
		req.Timeout = int64(*step.TimeoutSeconds) * 1000
	}
	if step.User != "" {
		return asUserRequest(req, step.User)
	}
	return req
}

// asUserExec is the script of the official SDK's asUser (3.5.0, see
// docs/dev/vercel-sandbox-api.md): $1 is the cwd, the rest the command.
const asUserExec = `cd "$1" || exit 1; shift; exec "$@"`

// asUserRequest is req run as user the way the SDK's asUser runs a command:
// `sudo -u USER -- bash -c asUserExec bash CWD [env K=V...] CMD ARGS`, cwd
// defaulting to the user's home and the environment passed through env(1),
// because sudo resets it. markedRequest puts the marker in bash's $0.
func asUserRequest(req vercel.RunCommandRequest, user string) vercel.RunCommandRequest {
	cwd := req.Cwd
	if cwd == "" {
		cwd = "/home/" + user
		if user == "root" {
			cwd = "/root"
		}
	}
	args := []string{"-u", user, "--", "bash", "-c", asUserExec, "bash", cwd}
	if len(req.Env) > 0 {
		args = append(args, "env")
		for _, k := range slices.Sorted(maps.Keys(req.Env)) {
			args = append(args, k+"="+req.Env[k])
		}
	}
	args = append(append(args, req.Command), req.Args...)
	return vercel.RunCommandRequest{Command: "sudo", Args: args, Env: map[string]string{}, Timeout: req.Timeout}
}

// asUserMarkerArg is the index in an asUserRequest's args of bash's $0.
const asUserMarkerArg = 6

// isAsUserRequest reports whether args are those of an asUserRequest.
func isAsUserRequest(name string, args []string) bool {
	return name == "sudo" && len(args) > asUserMarkerArg+1 && args[0] == "-u" && args[2] == "--" &&
		args[3] == "bash" && args[4] == "-c" && args[5] == asUserExec
}

// setupRequest is the run-command request for a setup step (and an exec
// probe, sandbox_probe.go), marked.
func setupRequest(step sandboxv1.SetupCommand, marker string) vercel.RunCommandRequest {
	return markedRequest(setupCommand(step), marker)
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
