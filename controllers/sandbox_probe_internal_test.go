package controllers

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
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
