package dataplane

import (
	"context"
	"fmt"
	"io"

	"github.com/getsentry/sandbox-controller/internal/vercel"
)

// Terminal is a command running on a terminal in the session: an interactive
// session as Vercel's `sandbox connect` opens one. Write sends keystrokes,
// Resize the terminal's size, and Wait copies what the terminal shows until
// the command exits.
type Terminal struct{ t *vercel.Terminal }

// OpenTerminal starts cmd on a new terminal of cols×rows in the session (a
// sudo command runs as root). It needs a running session.
func (s *Session) OpenTerminal(ctx context.Context, cmd Command, cols, rows uint16) (*Terminal, error) {
	is, err := s.vc.OpenInteractive(ctx, s.id)
	if err != nil {
		return nil, fmt.Errorf("open an interactive session: %w", err)
	}
	start := vercel.TerminalStart{Command: cmd.Name, Args: cmd.Args, Env: cmd.Env, Cwd: cmd.Cwd, Cols: cols, Rows: rows}
	if cmd.Sudo { // as the CLI's --sudo does
		start.Command, start.Args = "sudo", append([]string{cmd.Name}, cmd.Args...)
	}
	t, err := vercel.DialTerminal(ctx, is, start)
	if err != nil {
		return nil, err
	}
	return &Terminal{t: t}, nil
}

// Write types p into the terminal.
func (t *Terminal) Write(p []byte) (int, error) { return t.t.Write(p) }

// Resize sets the terminal's size; the command gets SIGWINCH.
func (t *Terminal) Resize(cols, rows uint16) error { return t.t.Resize(cols, rows) }

// Wait copies the terminal's output to out until the command has exited and
// returns its exit code.
func (t *Terminal) Wait(out io.Writer) (int, error) { return t.t.Wait(out) }

// Close hangs up: a command still running gets SIGHUP.
func (t *Terminal) Close() error { return t.t.Close() }
