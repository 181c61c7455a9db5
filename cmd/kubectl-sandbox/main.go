// Command kubectl-sandbox is the kubectl plugin `kubectl sandbox`: Box's
// verbs on Sandboxes, SandboxSnapshots and SandboxForks. The control verbs
// (create, up, pause, resume, snapshot, fork, scale, heartbeat, rm, wait)
// only write and watch custom resources through pkg/sandboxclient; exec, cp
// and shell go to the Sandbox's running session through pkg/dataplane with
// the Vercel credentials of the environment (VERCEL_TOKEN, VERCEL_TEAM_ID,
// VERCEL_PROJECT_ID, VERCEL_API_URL).
//
// Install it with `go install ./cmd/kubectl-sandbox` (or `make
// kubectl-sandbox`) anywhere on PATH; kubectl finds it as `kubectl sandbox`.
package main

import (
	"errors"
	"fmt"
	"os"

	"k8s.io/cli-runtime/pkg/genericiooptions"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

// run executes the command line and returns the process's exit code: the
// remote command's for exec and shell, 1 for any other failure.
func run(args []string) int {
	cmd := newRootCommand(genericiooptions.IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr})
	cmd.SetArgs(args)
	err := cmd.Execute()
	if err == nil {
		return 0
	}
	var exit *exitCodeError
	if errors.As(err, &exit) {
		return exit.code
	}
	// An error can carry status text (wait's reason) or a remote message.
	fmt.Fprintln(os.Stderr, "error:", escapeControl(err.Error()))
	return 1
}

// exitCodeError carries the exit code of a command run in the sandbox, so
// `kubectl sandbox exec` exits as the command did, without a message.
type exitCodeError struct{ code int }

func (e *exitCodeError) Error() string { return fmt.Sprintf("command exited with code %d", e.code) }
