//go:build !linux

package pty

import (
	"errors"
	"os"
)

// Open is only implemented on Linux.
func Open(Size) (master, slave *os.File, err error) {
	return nil, nil, errors.New("pseudo-terminals need Linux")
}

// SetSize is only implemented on Linux.
func SetSize(*os.File, Size) error { return errors.New("pseudo-terminals need Linux") }
