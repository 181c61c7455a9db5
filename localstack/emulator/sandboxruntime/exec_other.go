//go:build !linux

package sandboxruntime

import (
	"errors"
	"os"
	"syscall"
)

// probeNamespace reports that namespace mode needs Linux.
func probeNamespace() error { return errors.New("mount namespaces need Linux") }

// probeUserNamespace reports that user namespaces need Linux.
func probeUserNamespace() error { return errors.New("user namespaces need Linux") }

// enterSandbox is never called outside Linux (namespace mode is never selected).
func enterSandbox(*FS, string, bool, string, string) error {
	return errors.New("mount namespaces need Linux")
}

// newSysProcAttr returns the process attributes of a command: its own process
// group and the given credentials.
func newSysProcAttr(cred *syscall.Credential, _ bool) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Credential: cred}
}

// waitExited reaps proc; without waitid(WNOWAIT) the background processes of a
// finished command cannot be killed safely, so they are left running.
func waitExited(proc *os.Process) (*os.ProcessState, error) { return proc.Wait() }

// probeProcessLimit reports that process limits need Linux.
func probeProcessLimit() error { return errors.New("process limits need Linux") }

// processLimit is never called outside Linux (probeProcessLimit fails).
func processLimit(int, int) error { return errors.New("process limits need Linux") }

// probeEtcOverlay reports that a session /etc needs Linux.
func probeEtcOverlay() error { return errors.New("overlay mounts need Linux") }

// seedSessionEtc is never called outside Linux (probeEtcOverlay fails).
func seedSessionEtc(string) error { return errors.New("overlay mounts need Linux") }

// newEtcWorkdir is never called outside Linux (probeEtcOverlay fails).
func newEtcWorkdir(string) (string, error) { return "", errors.New("overlay mounts need Linux") }

// sandboxIdentityFiles is never called outside Linux (no user namespaces).
func sandboxIdentityFiles() (string, error) { return "", errors.New("user namespaces need Linux") }
