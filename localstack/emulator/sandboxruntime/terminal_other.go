//go:build !linux

package sandboxruntime

import (
	"errors"
	"os"
	"syscall"
)

func openPTY(WindowSize) (master, slave *os.File, err error) {
	return nil, nil, errors.New("interactive sessions need Linux")
}

func setWindowSize(*os.File, WindowSize) error { return errors.New("interactive sessions need Linux") }

func setTerminalAttr(*syscall.SysProcAttr) {}
