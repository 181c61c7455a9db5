package controllers

import (
	"slices"
	"testing"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
	"github.com/getsentry/sandbox-controller/internal/vercel"
)

// A marked request runs the same command (argv, cwd, env, sudo, timeout)
// through `sh -c 'exec "$@"'` with the marker as $0, and is found again by
// that marker only.
func TestMarkedRequest(t *testing.T) {
	for _, tc := range []struct {
		name     string
		req      vercel.RunCommandRequest
		wantArgs []string
	}{
		{"no arguments", vercel.RunCommandRequest{Command: "make"}, []string{"-c", setupExec, "m1", "make"}},
		{"arguments", vercel.RunCommandRequest{Command: "npm", Args: []string{"ci", "--silent"}}, []string{"-c", setupExec, "m1", "npm", "ci", "--silent"}},
		{"a shell script (a clone step)", vercel.RunCommandRequest{Command: "sh", Args: []string{"-c", "git clone x"}, Env: map[string]string{"A": "b"}, Cwd: "/w", Sudo: true, Timeout: 5000},
			[]string{"-c", setupExec, "m1", "sh", "-c", "git clone x"}},
	} {
		got := markedRequest(tc.req, "m1")
		if got.Command != "sh" || !slices.Equal(got.Args, tc.wantArgs) || got.Cwd != tc.req.Cwd || got.Sudo != tc.req.Sudo || got.Timeout != tc.req.Timeout || len(got.Env) != len(tc.req.Env) {
			t.Errorf("%s: got %+v", tc.name, got)
		}
		c := vercel.Command{ID: "c1", Name: got.Command, Args: got.Args}
		if !isSetupCommand(c, "m1") || isSetupCommand(c, "m2") {
			t.Errorf("%s: the marker does not identify the command", tc.name)
		}
	}
}

// findMarked finds a step's command among a session's commands by its
// marker, whatever its place in the list.
func TestFindMarked(t *testing.T) {
	client := vercel.Command{ID: "client", Name: "sh", Args: []string{"-c", "echo hi"}}
	step := func(id, marker string) vercel.Command {
		r := markedRequest(vercel.RunCommandRequest{Command: "true"}, marker)
		return vercel.Command{ID: id, Name: r.Command, Args: r.Args}
	}
	cmds := []vercel.Command{client, step("s2", buildMarker(1)), step("s1", buildMarker(0)), step("u1", setupMarker(1, 1))}
	for _, tc := range []struct {
		marker, want string
	}{
		{buildMarker(0), "s1"},
		{buildMarker(1), "s2"},
		{buildMarker(2), ""},
		{setupMarker(1, 1), "u1"},
		{setupMarker(2, 1), ""},
	} {
		got := ""
		if c := findMarked(cmds, tc.marker); c != nil {
			got = c.ID
		}
		if got != tc.want {
			t.Errorf("marker %s: got %q, want %q", tc.marker, got, tc.want)
		}
	}
}

// Markers name each step of a run once; setup markers name the attempt too.
func TestMarkersAreUnique(t *testing.T) {
	seen := map[string]bool{}
	for i := range 5 {
		for _, m := range []string{buildMarker(i), setupMarker(1, int32(i)+1), setupMarker(2, int32(i)+1)} {
			if seen[m] {
				t.Fatalf("marker %s given twice", m)
			}
			seen[m] = true
		}
	}
}

// stepOf reads a command's state from its exit code.
func TestStepOf(t *testing.T) {
	code := func(c int) *int { return &c }
	for _, tc := range []struct {
		name string
		exit *int
		want stepState
	}{
		{"running", nil, stepRunning},
		{"exited 0", code(0), stepSucceeded},
		{"exited 3", code(3), stepFailed},
		{"killed", code(exitKilledByTimeout), stepFailed},
	} {
		if got := stepOf(&vercel.Command{ExitCode: tc.exit}); got != tc.want {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
		}
	}
}

// A setup step's request is the spec's command, marked.
func TestSetupRequest(t *testing.T) {
	secs := int32(30)
	req := setupRequest(sandboxv1.SetupCommand{Command: "make", Args: []string{"all"}, Cwd: "/w", TimeoutSeconds: &secs}, "m")
	if req.Command != "sh" || !slices.Equal(req.Args, []string{"-c", setupExec, "m", "make", "all"}) || req.Cwd != "/w" || req.Timeout != 30_000 || req.Env == nil {
		t.Fatalf("request %+v", req)
	}
}
