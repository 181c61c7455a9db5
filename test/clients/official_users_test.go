package clients

import (
	"encoding/json"
	"os"
	"testing"

	"github.com/getsentry/sandbox-controller/localstack/emulator/sandboxruntime"
)

// TestOfficialSDKUsers: the official SDK's own createUser, createGroup,
// addUserToGroup and asUser work against the emulator (issue 34: useradd
// could not lock /etc/passwd and asUser's commands found no sudo), and the
// user outlives a stop of the persistent sandbox.
func TestOfficialSDKUsers(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the official SDK in Node.js")
	}
	if os.Geteuid() != 0 {
		t.Skip("users need exec mode namespace, which needs root")
	}
	if _, err := sandboxruntime.NewRunner(sandboxruntime.ModeNamespace, sandboxruntime.RunnerOptions{}); err != nil {
		t.Skipf("exec mode namespace unavailable: %v", err)
	}
	stdout := runSDKScript(t, "users.mjs", "sdk-users", "namespace")
	type result struct {
		ExitCode       int
		Stdout, Stderr string
	}
	var got struct {
		IDs     result
		Group   struct{ Groupname, SharedDir string }
		Read    *string
		Owner   string
		Root    string
		Again   *string
		Resumed result
	}
	must(t, json.Unmarshal(stdout, &got))
	t.Logf("%s", stdout)
	if want := "alice\nalice\nalice devs\n/home/alice\n/home/alice\n"; got.IDs.ExitCode != 0 || got.IDs.Stdout != want {
		t.Errorf("alice.runCommand(id ...) = %+v, want stdout %q", got.IDs, want)
	}
	if got.Group.Groupname != "devs" || got.Group.SharedDir != "/shared/devs" {
		t.Errorf("createGroup = %+v", got.Group)
	}
	if got.Read == nil || *got.Read != "hi alice" || got.Owner != "alice:alice\n" {
		t.Errorf("alice.writeFiles then readFileToBuffer = %v, owner %q; want \"hi alice\" owned by alice:alice", got.Read, got.Owner)
	}
	if got.Root != "root\n" {
		t.Errorf("asUser(root) id -un = %q", got.Root)
	}
	if got.Again == nil || *got.Again != "SandboxUserAlreadyExistsError" {
		t.Errorf("createUser of an existing user threw %v, want SandboxUserAlreadyExistsError", got.Again)
	}
	if got.Resumed.ExitCode != 0 || got.Resumed.Stdout != "alice\n" {
		t.Errorf("after stop and resume, asUser(alice) id -un = %+v", got.Resumed)
	}
}
