package clients

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/getsentry/sandbox-controller/localstack/emulator"
	"github.com/getsentry/sandbox-controller/test/officialsdk"
)

// TestOfficialSDKSnapshotTree: the official SDK's Snapshot.tree walks a
// persistent sandbox's snapshots in both directions, a node per page,
// through its own paginator (which asks for the next page with the previous
// page's pagination.next as snapshotId) — issue 34: the emulator used to
// ignore the direction and answer the second page 404.
func TestOfficialSDKSnapshotTree(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the official SDK in Node.js")
	}
	stdout := runSDKScript(t, "snapshot-tree.mjs", "sdk-tree", "")
	type walk struct {
		Anchor *string
		Nodes  []string
	}
	var got struct {
		Stops                  []string
		Current                *string
		Ancestors, Descendants walk
	}
	must(t, json.Unmarshal(stdout, &got))
	t.Logf("%s", stdout)
	if len(got.Stops) != 3 || got.Current == nil || *got.Current != got.Stops[2] {
		t.Fatalf("three stops made snapshots %v, current %v; want the last current", got.Stops, got.Current)
	}
	s := got.Stops
	if a := got.Ancestors; a.Anchor == nil || *a.Anchor != s[2] || !slices.Equal(a.Nodes, []string{s[1], s[0]}) {
		t.Errorf("Snapshot.tree(desc) from the newest: anchor %v nodes %v; want anchor %s and its ancestors %v", a.Anchor, a.Nodes, s[2], []string{s[1], s[0]})
	}
	if d := got.Descendants; d.Anchor == nil || *d.Anchor != s[0] || !slices.Equal(d.Nodes, []string{s[1], s[2]}) {
		t.Errorf("Snapshot.tree(asc) from the oldest: anchor %v nodes %v; want anchor %s and its descendants %v", d.Anchor, d.Nodes, s[0], []string{s[1], s[2]})
	}
}

// runSDKScript starts an emulator (exec mode exec, "" for the default) and
// runs testdata/script with the official SDK pointed at it and a fresh
// sandbox name (name-<hex>) in SANDBOX_NAME; it returns what the script
// printed on stdout (its result as JSON). A failing script fails the test
// with its output.
func runSDKScript(t *testing.T, script, name, exec_ string) []byte {
	t.Helper()
	modules := installOfficialClients(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	e, err := emulator.New(emulator.Options{DataDir: t.TempDir(), Exec: exec_})
	must(t, err)
	apiURL, err := e.Start("")
	must(t, err)
	t.Cleanup(func() {
		if err := e.Close(); err != nil {
			t.Errorf("close the emulator: %v", err)
		}
	})
	cmd := exec.CommandContext(ctx, "node", filepath.Join(repoRoot, "test", "clients", "testdata", script))
	cmd.Env = append(os.Environ(), officialsdk.NodeEnv(repoRoot, modules, apiURL, e.Token(), t.TempDir())...)
	cmd.Env = append(cmd.Env, "VERCEL_TOKEN="+e.Token(), "VERCEL_TEAM_ID=team_emulator", "VERCEL_PROJECT_ID=prj_emulator",
		"SANDBOX_NAME="+name+"-"+hex.EncodeToString(randomBytes(t, 4)))
	cmd.Dir = filepath.Dir(modules)
	stdout, err := cmd.Output()
	if ee, ok := err.(*exec.ExitError); ok {
		t.Fatalf("%s: %v\nstdout: %s\nstderr: %s", script, err, stdout, ee.Stderr)
	}
	must(t, err)
	return stdout
}
