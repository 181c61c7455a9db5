//go:build linux

package sandboxruntime

import (
	"os"
	"syscall"

	"github.com/getsentry/sandbox-controller/internal/pty"
)

// openPTY opens a new pseudo-terminal pair of the given size.
func openPTY(size WindowSize) (master, slave *os.File, err error) {
	return pty.Open(pty.Size(size))
}

// setWindowSize sets the terminal's size.
func setWindowSize(f *os.File, size WindowSize) error { return pty.SetSize(f, pty.Size(size)) }

// setTerminalAttr makes a command the leader of a new session whose
// controlling terminal is its stdin, as a login shell's is.
func setTerminalAttr(a *syscall.SysProcAttr) {
	a.Setpgid = false // a session leader is already its group's leader
	a.Setsid = true
	a.Setctty = true
	a.Ctty = 0
}
