//go:build linux

package pty

import (
	"fmt"
	"os"
	"strconv"
	"syscall"
	"unsafe"
)

// Open opens a new pseudo-terminal pair of the given size. The standard
// library and the ioctls the kernel documents in pty(7) are all it takes.
func Open(size Size) (master, slave *os.File, err error) {
	master, err = os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("open a pseudo-terminal: %w", err)
	}
	fail := func(err error) (*os.File, *os.File, error) {
		master.Close()
		return nil, nil, fmt.Errorf("open a pseudo-terminal: %w", err)
	}
	var unlock int32
	if err := ioctl(master, syscall.TIOCSPTLCK, uintptr(unsafe.Pointer(&unlock))); err != nil {
		return fail(err)
	}
	var n uint32
	if err := ioctl(master, syscall.TIOCGPTN, uintptr(unsafe.Pointer(&n))); err != nil {
		return fail(err)
	}
	slave, err = os.OpenFile("/dev/pts/"+strconv.FormatUint(uint64(n), 10), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		return fail(err)
	}
	if err := SetSize(master, size); err != nil {
		slave.Close()
		return fail(err)
	}
	return master, slave, nil
}

// SetSize sets the terminal's size; the kernel sends SIGWINCH to its
// foreground process group when it changes.
func SetSize(f *os.File, size Size) error {
	ws := struct{ rows, cols, x, y uint16 }{rows: size.Rows, cols: size.Cols}
	return ioctl(f, syscall.TIOCSWINSZ, uintptr(unsafe.Pointer(&ws)))
}

func ioctl(f *os.File, req, arg uintptr) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var errno syscall.Errno
	if err := rc.Control(func(fd uintptr) {
		_, _, errno = syscall.Syscall(syscall.SYS_IOCTL, fd, req, arg)
	}); err != nil {
		return err
	}
	if errno != 0 {
		return errno
	}
	return nil
}
