// Package pty opens pseudo-terminals (pty(7)) with the standard library only:
// the emulator runs interactive sessions on them, and tests and kubectl
// sandbox shell drive terminal programs through them.
package pty

// Size is a terminal's size in characters.
type Size struct{ Cols, Rows uint16 }
