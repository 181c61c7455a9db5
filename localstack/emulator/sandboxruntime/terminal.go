package sandboxruntime

import (
	"errors"
	"os"
	"sync"
)

// WindowSize is a terminal's size in characters.
type WindowSize struct{ Cols, Rows uint16 }

// Terminal is the master side of a command's pseudo-terminal: what is read
// from it is the command's output (stdout and stderr together, as a terminal
// shows them), what is written to it is typed into the command.
type Terminal struct {
	f    *os.File
	once sync.Once
}

// Read reads the command's output. Once the command and everything that held
// the terminal have exited it returns an error (EIO on Linux).
func (t *Terminal) Read(b []byte) (int, error) { return t.f.Read(b) }

// Write types b into the command's terminal.
func (t *Terminal) Write(b []byte) (int, error) { return t.f.Write(b) }

// Resize changes the terminal's size; the command gets SIGWINCH.
func (t *Terminal) Resize(size WindowSize) error {
	if size.Cols == 0 || size.Rows == 0 {
		return errors.New("terminal size must be at least 1x1")
	}
	return setWindowSize(t.f, size)
}

// Close closes the master side; a command still attached gets SIGHUP.
func (t *Terminal) Close() error {
	var err error
	t.once.Do(func() { err = t.f.Close() })
	return err
}

// File returns the master side as a file (for read deadlines).
func (t *Terminal) File() *os.File { return t.f }

// StartTerminal starts spec like Start, but on a new pseudo-terminal of the
// given size: the command leads its own session with the terminal as its
// controlling terminal and as stdin, stdout and stderr. Its output does not go
// to Output(): read it from the returned Terminal, which the caller closes.
// Exec mode none has no terminals (ErrNoTerminal).
func (r *Runner) StartTerminal(spec Command, size WindowSize) (*Process, *Terminal, error) {
	if r.m == ModeNone {
		return nil, nil, ErrNoTerminal
	}
	if size.Cols == 0 || size.Rows == 0 {
		size = WindowSize{Cols: 80, Rows: 24}
	}
	master, slave, err := openPTY(size)
	if err != nil {
		return nil, nil, err
	}
	p, err := r.start(spec, slave)
	slave.Close() // the command holds its own copy
	if err != nil {
		master.Close()
		return nil, nil, err
	}
	return p, &Terminal{f: master}, nil
}

// ErrNoTerminal is returned by StartTerminal in exec mode none.
var ErrNoTerminal = errors.New("interactive sessions need exec mode namespace or host: exec mode none runs no commands")
