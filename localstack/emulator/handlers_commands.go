package emulator

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"os"
	"path"
	"slices"
	"time"

	"github.com/getsentry/sandbox-controller/internal/vercel"
	"github.com/getsentry/sandbox-controller/localstack/emulator/sandboxruntime"
)

func commandNotFound(id string) *apiError { return notFound("Command %s not found.", id) }

// commandLocked finds a command of a live session.
func (e *Emulator) commandLocked(rc *reqCtx) (*commandRec, *apiError) {
	s, err := e.liveSessionLocked(rc)
	if err != nil {
		return nil, err
	}
	id := rc.param("cid")
	for _, c := range s.commands {
		if c.id == id {
			return c, nil
		}
	}
	return nil, commandNotFound(id)
}

// waitCommand records a command's exit time as soon as it exits.
func (e *Emulator) waitCommand(c *commandRec, p *sandboxruntime.Process) {
	defer e.wg.Done()
	<-p.Done()
	code, _ := p.ExitCode()
	e.mu.Lock()
	if !c.exited {
		c.exited, c.exitCode, c.finishedAt = true, code, e.nowMs()
	}
	e.mu.Unlock()
}

func (e *Emulator) handleRunCommand(rc *reqCtx) {
	var b runCommandBody
	if !rc.decodeChecked(&b, false) {
		return
	}
	q := rc.r.URL.Query()
	wait := (b.Wait != nil && *b.Wait) || truthy(q.Get("wait"))
	logs := wait && ((b.Logs != nil && *b.Logs) || truthy(q.Get("logs")))

	var c *commandRec
	var first vercel.Command
	if err := withLocked(e, rc, e.liveSessionLocked, func(s *sessionRec) (err *apiError) {
		c, err = e.startCommandLocked(s, &b)
		if err == nil {
			first = e.renderCommand(c)
			first.ExitCode, first.DurationMs = nil, 0 // the first record is always "started"
		}
		return err
	}); err != nil {
		rc.fail(err)
		return
	}
	if !wait {
		rc.json(http.StatusOK, vercel.CommandResponse{Command: first})
		return
	}
	p := c.proc
	nd := newNDJSON(rc.w)
	if nd.write(map[string]any{"command": first}) != nil {
		return
	}
	ctx := rc.r.Context()
	if logs {
		if err := p.Output().Follow(ctx, nd.logRecord); err != nil {
			return
		}
	}
	select {
	case <-p.Done():
	case <-ctx.Done():
		return
	}
	e.mu.Lock()
	last := e.renderCommand(c)
	e.mu.Unlock()
	_ = nd.write(map[string]any{"command": last})
}

// startCommandLocked starts the command of a run-command body in the live
// session s and records it.
func (e *Emulator) startCommandLocked(s *sessionRec, b *runCommandBody) (*commandRec, *apiError) {
	// In exec mode "none" commands never touch the disk: a session gets a
	// directory only when a file is written.
	fsys := s.fs
	if fsys == nil && e.runner.Mode() != sandboxruntime.ModeNone {
		var err *apiError
		if fsys, err = e.fsLocked(s); err != nil {
			return nil, err
		}
	}
	cwd := s.cwd
	if b.Cwd != nil {
		cwd = *b.Cwd
	}
	env := maps.Clone(s.env)
	if env == nil {
		env = map[string]string{}
	}
	maps.Copy(env, b.Env)
	if err := e.admitCommandLocked(s); err != nil {
		return nil, err
	}
	spec := sandboxruntime.Command{FS: fsys, Name: *b.Command, Args: b.Args, Cwd: cwd, Env: env, Sudo: b.Sudo != nil && *b.Sudo,
		OutputBudget: s.output}
	if err := e.egressCommandLocked(s, &spec); err != nil {
		return nil, err
	}
	if b.Timeout != nil {
		spec.Timeout = time.Duration(*b.Timeout) * time.Millisecond
	}
	p, err := e.runner.Start(spec)
	if err != nil {
		return nil, runtimeError(err)
	}
	c := &commandRec{
		id:          newCommandID(),
		name:        *b.Command,
		args:        slices.Clone(b.Args),
		cwd:         absSandboxPath(cwd),
		sess:        s,
		startedAt:   e.nowMs(),
		attachStdin: b.AttachStdin != nil && *b.AttachStdin,
		proc:        p,
	}
	s.commands = append(s.commands, c)
	if code, exited := p.ExitCode(); exited {
		c.exited, c.exitCode, c.finishedAt = true, code, c.startedAt
	} else {
		e.wg.Add(1)
		go e.waitCommand(c, p)
	}
	return c, nil
}

// admitCommandLocked refuses a new command of s while Options.MaxLiveCommands
// of its commands run, and gives s its output budget on its first command.
// The real API publishes no such cap (docs/dev/emulator-gaps.md): 429, as for
// Vercel's other "too many at once" limit, tells clients to try again later.
func (e *Emulator) admitCommandLocked(s *sessionRec) *apiError {
	if s.output == nil && e.opts.SessionOutputBytes > 0 {
		s.output = sandboxruntime.NewOutputBudget(e.opts.SessionOutputBytes)
	}
	max := e.opts.MaxLiveCommands
	if max <= 0 {
		return nil
	}
	live := 0
	for _, c := range s.commands {
		e.observeExit(c)
		if !c.exited {
			live++
		}
	}
	if live < max {
		return nil
	}
	return &apiError{status: http.StatusTooManyRequests, code: "too_many_commands", message: fmt.Sprintf(
		"Session %s already runs %d commands, the most the emulator allows at once (--max-live-commands). "+
			"Wait for one to exit or kill one, then try again.", s.id, live)}
}

// runtimeError maps an error of package sandboxruntime to an API answer (nil
// for none).
func runtimeError(err error) *apiError {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, sandboxruntime.ErrSudoRefused):
		return &apiError{status: 403, code: "forbidden", message: err.Error()}
	case errors.Is(err, sandboxruntime.ErrInvalidInput):
		return badRequest("%s", err.Error())
	case errors.Is(err, os.ErrNotExist):
		return notFound("%s", err.Error())
	}
	return &apiError{status: 500, code: "internal_server_error", message: err.Error()}
}

// fsLocked returns the session's filesystem, creating it on first use.
func (e *Emulator) fsLocked(s *sessionRec) (*sandboxruntime.FS, *apiError) {
	f, err := e.ensureFSLocked(s)
	if err != nil {
		return nil, &apiError{status: 500, code: "internal_server_error", message: "Could not prepare the session filesystem: " + err.Error()}
	}
	return f, nil
}

func (e *Emulator) handleListCommands(rc *reqCtx) {
	serve(e, rc, e.liveSessionLocked, func(s *sessionRec) (any, *apiError) {
		out := vercel.ListCommandsResponse{Commands: make([]vercel.Command, 0, len(s.commands))}
		for i := len(s.commands) - 1; i >= 0; i-- {
			if s.commands[i].interactive {
				continue
			}
			out.Commands = append(out.Commands, e.renderCommand(s.commands[i]))
		}
		return out, nil
	})
}

func (e *Emulator) handleGetCommand(rc *reqCtx) {
	wait := truthy(rc.query("wait"))
	serve(e, rc, e.commandLocked, func(c *commandRec) (any, *apiError) {
		if wait && c.proc != nil {
			e.observeExit(c)
			if !c.exited {
				if err := e.waitUnlocked(rc, c.proc.Done(), nil); err != nil {
					return nil, err
				}
			}
		}
		return vercel.CommandResponse{Command: e.renderCommand(c)}, nil
	})
}

func (e *Emulator) handleKillCommand(rc *reqCtx) {
	var b killBody
	if !rc.decodeChecked(&b, false) {
		return
	}
	serve(e, rc, e.commandLocked, func(c *commandRec) (any, *apiError) {
		e.observeExit(c)
		// Killing a command that already exited answers it unchanged.
		if p := c.proc; !c.exited && p != nil {
			e.unlock()
			err := killAndWait(rc, p, *b.Signal)
			e.mu.Lock()
			if err != nil {
				return nil, runtimeError(err)
			}
		}
		return vercel.CommandResponse{Command: e.renderCommand(c)}, nil
	})
}

// killAndWait signals p and gives the signal a moment to take effect, so that
// the answer usually shows the exit.
func killAndWait(rc *reqCtx, p *sandboxruntime.Process, signal int) error {
	if err := p.Kill(signal); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	t := time.NewTimer(200 * time.Millisecond)
	defer t.Stop()
	select {
	case <-p.Done():
	case <-t.C:
	case <-rc.r.Context().Done():
	}
	return nil
}

func (e *Emulator) handleCommandLogs(rc *reqCtx) {
	var p *sandboxruntime.Process
	if err := withLocked(e, rc, e.commandLocked, func(c *commandRec) *apiError {
		p = c.proc
		return nil
	}); err != nil {
		rc.fail(err)
		return
	}
	nd := newNDJSON(rc.w)
	nd.start()
	if p != nil {
		_ = p.Output().Follow(rc.r.Context(), nd.logRecord)
	}
}

func (e *Emulator) handleCommandStdin(rc *reqCtx) {
	var b stdinBody
	if !rc.decodeChecked(&b, false) {
		return
	}
	serve(e, rc, e.commandLocked, func(c *commandRec) (any, *apiError) {
		if !c.attachStdin {
			return nil, badRequest("Command %s was not started with `attachStdin: true`.", c.id)
		}
		// The runtime gives every command an empty stdin (/dev/null); there is
		// nothing to write to.
		return nil, &apiError{status: 501, code: "not_implemented", message: "The emulator does not support writing to a command's stdin."}
	})
}

// ---- NDJSON ----

// ndjson writes application/x-ndjson records, flushing after each line.
type ndjson struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	started bool
}

func newNDJSON(w http.ResponseWriter) *ndjson {
	return &ndjson{w: w, rc: http.NewResponseController(w)}
}

func (n *ndjson) start() {
	if n.started {
		return
	}
	n.started = true
	n.w.Header().Set("Content-Type", "application/x-ndjson")
	n.w.Header().Set("Cache-Control", "no-cache")
	n.w.Header().Set("X-Accel-Buffering", "no")
	n.w.WriteHeader(http.StatusOK)
	_ = n.rc.Flush()
}

func (n *ndjson) write(v any) error {
	n.start()
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if _, err := n.w.Write(append(b, '\n')); err != nil {
		return err
	}
	if err := n.rc.Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return err
	}
	return nil
}

type logLine struct {
	Stream string `json:"stream"`
	Data   string `json:"data"`
}

func (n *ndjson) logRecord(r sandboxruntime.Record) error {
	return n.write(logLine(r))
}

// absSandboxPath cleans a command cwd as the sandbox sees it: relative
// paths are relative to /vercel/sandbox.
func absSandboxPath(p string) string {
	if !path.IsAbs(p) {
		p = path.Join(defaultCwd, p)
	}
	return path.Clean(p)
}
