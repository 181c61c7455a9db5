package controllers

// The one step runner: a list of commands run one by one in a Vercel
// session, each detached and polled across reconciles, so no worker waits on
// a command; a step that exits non-zero stops the run, and its owner reports
// the exit code and the output tail. Sandbox setup (sandbox_setup.go) and
// recipe builds (sandboxsnapshot_builder.go) use it.
//
// The one crash-recovery rule is the marker: every step's command is started
// with a marker among its arguments (markedRequest), and the running step's
// command id is kept in status. When a crash lost that id, the command is
// found again in the session's command list by its marker, never by its
// place in the list, which clients add to as well; only when no command
// carries the marker is the step started.

import (
	"context"
	"fmt"
	"slices"

	"github.com/getsentry/sandbox-controller/internal/vercel"
)

// setupExec runs a marked command with the marker as $0: the shell replaces
// itself with the command (resolved through PATH, with its arguments, cwd,
// environment, exit code and timeout unchanged), and the session's command
// list shows the marker among the arguments. Vercel's list reports neither
// environment nor any label of a command, only its argv and cwd.
const setupExec = `exec "$@"`

// markedRequest is req run through setupExec with the marker as $0; a
// step run as a user (asUserRequest) keeps the SDK's shape, with the marker
// as its bash's $0, so that sudo stays the command.
func markedRequest(req vercel.RunCommandRequest, marker string) vercel.RunCommandRequest {
	if isAsUserRequest(req.Command, req.Args) {
		req.Args = slices.Clone(req.Args)
		req.Args[asUserMarkerArg] = marker
		return req
	}
	req.Args = append([]string{"-c", setupExec, marker, req.Command}, req.Args...)
	req.Command = "sh"
	return req
}

// isSetupCommand reports whether a command of a session was started by
// markedRequest with the marker (setup, build and probe commands alike).
func isSetupCommand(c vercel.Command, marker string) bool {
	if isAsUserRequest(c.Name, c.Args) {
		return c.Args[asUserMarkerArg] == marker
	}
	return c.Name == "sh" && len(c.Args) >= 4 && c.Args[0] == "-c" && c.Args[1] == setupExec && c.Args[2] == marker
}

// findMarked returns the command of cmds started with the marker, or nil.
func findMarked(cmds []vercel.Command, marker string) *vercel.Command {
	i := slices.IndexFunc(cmds, func(c vercel.Command) bool { return isSetupCommand(c, marker) })
	if i < 0 {
		return nil
	}
	return &cmds[i]
}

// stepCursor is where a run stands, as its owner's status records it.
type stepCursor struct {
	// completed is the number of steps that exited 0.
	completed int
	// commandID is the running step's command; "" when not known.
	commandID string
	// session is the session commandID runs in.
	session string
}

// stepState is what one look at the current step's command found.
type stepState int

const (
	// stepsDone: every step exited 0.
	stepsDone stepState = iota
	// stepRunning: the current step's command has not exited.
	stepRunning
	// stepFailed: the current step's command exited non-zero.
	stepFailed
	// stepSucceeded: the current step's command exited 0; the run moves on.
	stepSucceeded
)

// stepOf is the state of a step's command.
func stepOf(c *vercel.Command) stepState {
	switch {
	case c.ExitCode == nil:
		return stepRunning
	case *c.ExitCode != 0:
		return stepFailed
	}
	return stepSucceeded
}

// stepResult is where a run stands after advance.
type stepResult struct {
	state stepState
	// cmd is the running or failed command (nil when done).
	cmd *vercel.Command
	// started: advance started cmd.
	started bool
}

// stepRun is one run of steps in one session.
type stepRun struct {
	api     SandboxAPI
	session string
	// n is the number of steps.
	n int
	// marker names step i (from 0) uniquely within the session.
	marker func(i int) string
	// request is step i's command before marking, with the secret values
	// it carries (redacted from errors).
	request func(ctx context.Context, i int) (vercel.RunCommandRequest, []string, error)
	// label names step i in errors.
	label func(i int) string
	// started, when set, is told of each step advance starts.
	started func(i int, cmd *vercel.Command)
}

// advance polls the current step, and moves past each step that exited 0,
// starting the next one when no command of the session carries its marker.
// It stops at the first step that runs or failed. A command id recorded for
// another session is dropped: that session stopped before the step exited,
// and the step runs again in this one.
func (s stepRun) advance(ctx context.Context, cur *stepCursor) (stepResult, error) {
	for cur.completed < s.n {
		if cur.commandID != "" && cur.session != s.session {
			cur.commandID = ""
		}
		cur.session = s.session
		started := false
		if cur.commandID == "" {
			id, fresh, err := s.findOrStart(ctx, cur.completed)
			if err != nil {
				return stepResult{state: stepRunning}, err
			}
			cur.commandID, started = id, fresh
		}
		cmd, err := s.api.GetCommand(ctx, s.session, cur.commandID, false)
		if err != nil {
			return stepResult{state: stepRunning}, fmt.Errorf("get command %s of %s: %w", cur.commandID, s.label(cur.completed), err)
		}
		if st := stepOf(cmd); st != stepSucceeded {
			return stepResult{state: st, cmd: cmd, started: started}, nil
		}
		cur.completed++
		cur.commandID = ""
	}
	return stepResult{state: stepsDone}, nil
}

// findOrStart returns the command of step i: the one the session lists with
// its marker, else a new one. fresh reports that it was started now.
func (s stepRun) findOrStart(ctx context.Context, i int) (id string, fresh bool, err error) {
	marker := s.marker(i)
	cmds, err := s.api.ListCommands(ctx, s.session)
	if err != nil {
		return "", false, fmt.Errorf("list commands of session %s: %w", s.session, err)
	}
	if c := findMarked(cmds, marker); c != nil {
		return c.ID, false, nil
	}
	req, secrets, err := s.request(ctx, i)
	if err != nil {
		return "", false, err
	}
	cmd, err := s.api.RunCommand(ctx, s.session, markedRequest(req, marker))
	if err != nil {
		return "", false, redact(fmt.Errorf("start %s: %w", s.label(i), err), secrets)
	}
	if s.started != nil {
		s.started(i, cmd)
	}
	return cmd.ID, true, nil
}
