package controllers

// The setup phase: spec.setup commands run one by one, detached, in a new
// session, and are polled until each exits.

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
	"github.com/getsentry/sandbox-controller/internal/vercel"
)

// runSetup advances spec.setup by at most one command per step and reports
// whether all of it has succeeded. Commands run detached and are polled, so no
// worker waits for them; the running command's id is kept in status, and after
// a crash the command is found again in the session's command list instead of
// being started twice.
func (r *SandboxReconciler) runSetup(ctx context.Context, sbx *sandboxv1.Sandbox, sessionID string) (bool, ctrl.Result, error) {
	steps := sbx.Spec.Setup
	st := sbx.Status.Setup
	for st != nil && int(st.Completed) < len(steps) {
		step := steps[st.Completed]
		if st.SessionID != sessionID {
			// The filesystem was set up (or half set up) in an earlier session;
			// setup does not run again after a resume.
			return true, ctrl.Result{}, nil
		}
		if st.CommandID == "" {
			id, err := r.startSetupCommand(ctx, sbx, sessionID, step)
			if err != nil {
				return false, ctrl.Result{}, err
			}
			st.CommandID = id
		}
		cmd, err := r.Vercel.GetCommand(ctx, sessionID, st.CommandID, false)
		if err != nil {
			return false, ctrl.Result{}, fmt.Errorf("get setup command %s: %w", st.CommandID, err)
		}
		if cmd.ExitCode == nil {
			setReady(sbx, readiness{sandboxv1.SandboxSettingUp, metav1.ConditionFalse, sandboxv1.ReasonSettingUp,
				fmt.Sprintf("Running setup step %d of %d (%s)", st.Completed+1, len(steps), stepName(step))})
			return false, ctrl.Result{RequeueAfter: setupPoll}, nil
		}
		if *cmd.ExitCode != 0 {
			return false, ctrl.Result{}, r.reportSetupFailed(ctx, sbx, sessionID, step, cmd)
		}
		st.Completed++
		st.CommandID = ""
	}
	return true, ctrl.Result{}, nil
}

func (r *SandboxReconciler) startSetupCommand(ctx context.Context, sbx *sandboxv1.Sandbox, sessionID string, step sandboxv1.SetupCommand) (string, error) {
	st := sbx.Status.Setup
	// A command started before a crash, whose id never reached status, is the
	// (completed+1)-th command of the session (the list is newest first).
	cmds, err := r.Vercel.ListCommands(ctx, sessionID)
	if err != nil {
		return "", fmt.Errorf("list commands of session %s: %w", sessionID, err)
	}
	if n := len(cmds); n > int(st.Completed) {
		return cmds[n-1-int(st.Completed)].ID, nil
	}
	req := vercel.RunCommandRequest{Command: step.Command, Args: step.Args, Cwd: step.Cwd, Env: map[string]string{}, Sudo: step.Sudo}
	if req.Args == nil {
		req.Args = []string{}
	}
	if step.TimeoutSeconds != nil {
		req.Timeout = int64(*step.TimeoutSeconds) * 1000
	}
	cmd, err := r.Vercel.RunCommand(ctx, sessionID, req)
	if err != nil {
		return "", fmt.Errorf("run setup step %d (%s): %w", st.Completed+1, stepName(step), err)
	}
	r.Recorder.Eventf(sbx, nil, corev1.EventTypeNormal, "SetupStarted", "RunCommand", "Started setup step %d (%s)", st.Completed+1, stepName(step))
	return cmd.ID, nil
}

func (r *SandboxReconciler) reportSetupFailed(ctx context.Context, sbx *sandboxv1.Sandbox, sessionID string, step sandboxv1.SetupCommand, cmd *vercel.Command) error {
	st := &sbx.Status
	secrets := &secretReader{reader: r.APIReader, namespace: sbx.Namespace}
	// Secret values are known only after resolving the spec; they are scrubbed
	// from the output, which a command may have echoed: the current values,
	// and those sent to Vercel when the sandbox was created or updated (the
	// command ran with those if the Secret was rotated since).
	_, _ = buildConfig(ctx, secrets, &sbx.Spec)
	_ = buildSource(ctx, secrets, &sbx.Spec.Source, &vercel.CreateSandboxRequest{})
	values := r.sentSecrets.with(sbx.UID, secrets.values)
	tail, err := commandOutputTail(ctx, r.Vercel, sessionID, cmd.ID, values)
	if err != nil {
		return fmt.Errorf("read output of setup command %s: %w", cmd.ID, err)
	}
	msg := fmt.Sprintf("Setup step %d (%s) exited with code %d", st.Setup.Completed+1, stepName(step), *cmd.ExitCode)
	if tail != "" {
		msg += ": " + tail
	}
	msg = scrub(msg, values)
	wasFailed := st.Phase == sandboxv1.SandboxFailed
	setReady(sbx, readiness{sandboxv1.SandboxFailed, metav1.ConditionFalse, sandboxv1.ReasonSetupFailed, msg})
	if !wasFailed {
		r.Recorder.Eventf(sbx, nil, corev1.EventTypeWarning, sandboxv1.ReasonSetupFailed, "RunCommand", "%s", truncate(msg, maxEventNote))
	}
	return nil
}

func stepName(s sandboxv1.SetupCommand) string {
	if s.Name != "" {
		return s.Name
	}
	return s.Command
}
