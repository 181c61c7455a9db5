package controllers

import (
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
	"github.com/getsentry/sandbox-controller/internal/vercel"
)

func TestProbeVerdict(t *testing.T) {
	running := readiness{sandboxv1.SandboxRunning, metav1.ConditionTrue, sandboxv1.ReasonRunning, "Session s is running"}
	withReady := func(reason, msg string) *sandboxv1.Sandbox {
		sbx := &sandboxv1.Sandbox{}
		setCondition(&sbx.Status.Conditions, 1, sandboxv1.ConditionReady, metav1.ConditionFalse, reason, msg)
		return sbx
	}
	for _, tc := range []struct {
		name          string
		sbx           *sandboxv1.Sandbox
		ps            probeState
		msg           string
		reason, wantM string
	}{
		{"never passed, failed now", &sandboxv1.Sandbox{}, probeState{failures: 1}, "returned 503",
			sandboxv1.ReasonProbeNotReady, "Readiness probe has not passed yet: returned 503"},
		{"never passed, not probed yet", withReady(sandboxv1.ReasonSettingUp, "setup"), probeState{}, "",
			sandboxv1.ReasonProbeNotReady, "Waiting for the readiness probe"},
		{"never passed, between probes: status message stays", withReady(sandboxv1.ReasonProbeNotReady, "earlier"), probeState{failures: 4}, "",
			sandboxv1.ReasonProbeNotReady, "earlier"},
		{"passed, fewer failures than the threshold", &sandboxv1.Sandbox{}, probeState{passed: true, failures: 2}, "returned 503",
			sandboxv1.ReasonRunning, running.message},
		{"passed, threshold reached", &sandboxv1.Sandbox{}, probeState{passed: true, failures: 3}, "returned 503",
			sandboxv1.ReasonProbeFailed, "Readiness probe failed 3 times in a row: returned 503"},
		{"passed, passing", withReady(sandboxv1.ReasonProbeFailed, "x"), probeState{passed: true}, "",
			sandboxv1.ReasonRunning, running.message},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := probeVerdict(tc.sbx, tc.ps, 3, running, tc.msg)
			if got.reason != tc.reason || got.message != tc.wantM || got.phase != sandboxv1.SandboxRunning {
				t.Fatalf("got %+v, want reason %s message %q", got, tc.reason, tc.wantM)
			}
			if want := tc.reason == sandboxv1.ReasonRunning; (got.ready == metav1.ConditionTrue) != want {
				t.Fatalf("ready %s", got.ready)
			}
		})
	}
}

// A status.routes entry written by someone else must not aim the manager's
// probe requests at an address of their choosing.
func TestIsRouteURL(t *testing.T) {
	const base = "http://127.0.0.1:4000"
	for _, tc := range []struct {
		url  string
		want bool
	}{
		{"https://sb-abc123.vercel.run", true},
		{"https://sb-abc123.vercel.run/", true},
		{"http://127.0.0.1:4000/_routes/sb-abc123", true},
		{"http://sb-abc123.vercel.run", false},             // not https
		{"https://sb-abc123.vercel.run:8443", false},       // another port
		{"https://vercel.run.attacker.example", false},     // suffix trick
		{"https://user:pw@sb-abc123.vercel.run", false},    // user info
		{"http://169.254.169.254/latest/meta-data", false}, // metadata service
		{"http://127.0.0.1:4000/v2/sandboxes", false},      // the API, not a route
		{"http://127.0.0.1:4000/_routes/../v2/sandboxes", false},
		{"http://127.0.0.1:40000/_routes/sb-abc123", false},
		{"https://sb-abc123.vercel.run/?x=1", false},
	} {
		if got := isRouteURL(tc.url, base); got != tc.want {
			t.Errorf("isRouteURL(%q) = %v, want %v", tc.url, got, tc.want)
		}
	}
	if isRouteURL("http://127.0.0.1:4000/_routes/sb-abc123", "") {
		t.Error("with no route base only vercel.run routes are allowed")
	}
}

// The per-namespace bound on running exec probe commands: a namespace at its
// limit waits, another does not, and a slot nobody released (a session that
// stopped while its probe ran) expires with its command's timeout.
func TestProbeSlots(t *testing.T) {
	var s probeSlots
	now := time.Unix(1000, 0)
	key := func(ns, name string) types.NamespacedName { return types.NamespacedName{Namespace: ns, Name: name} }
	until := now.Add(10 * time.Second)
	for _, name := range []string{"a", "b"} {
		if !s.acquire(key("busy", name), until, now, 2) {
			t.Fatalf("%s: refused below the limit", name)
		}
	}
	if s.acquire(key("busy", "c"), until, now, 2) {
		t.Fatal("a third probe ran in a namespace limited to two")
	}
	if !s.acquire(key("busy", "a"), until, now, 2) {
		t.Fatal("a holder was refused its own slot")
	}
	if !s.acquire(key("other", "x"), until, now, 2) {
		t.Fatal("another namespace waited for this one's probes")
	}
	s.release(key("busy", "a"))
	if !s.acquire(key("busy", "c"), until, now, 2) {
		t.Fatal("a released slot was not free")
	}
	// A command found running after a restart counts, whatever the bound.
	s.take(key("busy", "d"), now.Add(time.Second))
	if s.acquire(key("busy", "e"), until, now, 3) {
		t.Fatal("an adopted probe command did not count")
	}
	if !s.acquire(key("busy", "e"), until, now.Add(2*time.Second), 3) {
		t.Fatal("a slot past its command's timeout did not expire")
	}
}

// A probe command is started as setup commands are, with its marker as $0,
// and found again by it; another probe's marker does not match.
func TestProbeRequestMarker(t *testing.T) {
	e := &sandboxv1.ExecProbe{Command: "test", Args: []string{"-f", "/ready"}}
	marker := probeMarker(`{"exec":{"command":"test"}}`)
	req := probeRequest(e, 40*time.Second, marker)
	if req.Command != "sh" || req.Timeout != 40_000 || !slices.Equal(req.Args, []string{"-c", setupExec, marker, "test", "-f", "/ready"}) {
		t.Fatalf("request %+v", req)
	}
	c := vercel.Command{Name: req.Command, Args: req.Args}
	if !isSetupCommand(c, marker) {
		t.Fatal("the probe command is not found by its marker")
	}
	if isSetupCommand(c, probeMarker(`{"exec":{"command":"true"}}`)) {
		t.Fatal("another probe's marker matched")
	}
}
