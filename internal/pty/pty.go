// Package pty opens pseudo-terminals (pty(7)) with the standard library only:
// the emulator runs interactive sessions on them, and tests and kubectl
// sandbox shell drive terminal programs through them.
package pty

import (
	"os"
	"os/exec"
	"syscall"
)

// Size is a terminal's size in characters.
type Size struct{ Cols, Rows uint16 }

// Start starts cmd on a new terminal of the given size, as a login shell
// runs: cmd leads a new session whose controlling terminal, stdin, stdout
// and stderr are the terminal. It returns the master side: read what cmd
// shows, write what a user types. The caller closes it after cmd.Wait.
func Start(cmd *exec.Cmd, size Size) (*os.File, error) {
	master, slave, err := Open(size)
	if err != nil {
		return nil, err
	}
	defer slave.Close() // cmd holds its own copy
	cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setsid, cmd.SysProcAttr.Setctty, cmd.SysProcAttr.Ctty = true, true, 0
	if err := cmd.Start(); err != nil {
		master.Close()
		return nil, err
	}
	return master, nil
}
