package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/term"
)

// terminals returns in and out as files when both are terminals.
func terminals(in io.Reader, out io.Writer) (*os.File, *os.File, bool) {
	fi, ok1 := in.(*os.File)
	fo, ok2 := out.(*os.File)
	if !ok1 || !ok2 || !term.IsTerminal(int(fi.Fd())) || !term.IsTerminal(int(fo.Fd())) {
		return nil, nil, false
	}
	return fi, fo, true
}

// terminalShell runs sh on a terminal in the session (Vercel's interactive
// sessions, docs/dev/interactive-sessions.md) with the local terminal in raw
// mode, so that every key reaches the sandbox's terminal, and returns the
// shell's exit code.
func terminalShell(ctx context.Context, s *liveSession, flags *sessionFlags, in, out *os.File) (int, error) {
	cmd, err := flags.command("sh", nil)
	if err != nil {
		return -1, err
	}
	if cmd.Env == nil {
		cmd.Env = map[string]string{}
	}
	if _, ok := cmd.Env["TERM"]; !ok {
		cmd.Env["TERM"] = os.Getenv("TERM")
		if cmd.Env["TERM"] == "" {
			cmd.Env["TERM"] = "xterm-256color"
		}
	}
	if _, ok := cmd.Env["PS1"]; !ok {
		cmd.Env["PS1"] = s.name + ":$PWD$ "
	}
	cols, rows, err := term.GetSize(int(out.Fd()))
	if err != nil {
		cols, rows = 80, 24
	}
	t, err := s.OpenTerminal(ctx, cmd, uint16(cols), uint16(rows))
	if err != nil {
		return -1, s.explain(err)
	}
	defer t.Close()
	state, err := term.MakeRaw(int(in.Fd()))
	if err != nil {
		return -1, fmt.Errorf("put the terminal in raw mode: %w", err)
	}
	defer func() { _ = term.Restore(int(in.Fd()), state) }()

	winch := make(chan os.Signal, 1)
	signal.Notify(winch, syscall.SIGWINCH)
	defer signal.Stop(winch)
	done := make(chan struct{})
	defer close(done)
	go func() {
		for {
			select {
			case <-winch:
				if c, r, err := term.GetSize(int(out.Fd())); err == nil {
					_ = t.Resize(uint16(c), uint16(r))
				}
			case <-done:
				return
			}
		}
	}()
	// Keystrokes; the copy ends with the process (a read of stdin cannot be
	// interrupted), after Wait has returned.
	go func() {
		_, _ = io.Copy(writerFunc(func(p []byte) (int, error) {
			s.activity()
			return t.Write(p)
		}), in)
	}()
	return t.Wait(out)
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
