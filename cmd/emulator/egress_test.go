package main

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/getsentry/sandbox-controller/localstack/emulator/sandboxruntime"
)

// TestRunEgressFlags checks the egress flags: bad values are refused naming
// the flag, enforcement cannot be forced where commands share the host's
// network, and the banner says whether policies are enforced.
func TestRunEgressFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--exec=none", "--egress-host=api.example.test"}, "want name=ip:port"},
		{[]string{"--exec=none", "--egress-host=api.example.test=localhost:8443"}, "must be an IP and port"},
		{[]string{"--exec=none", "--egress=maybe"}, "--egress must be on or off"},
		{[]string{"--exec=none", "--egress-upstream-ca=" + t.TempDir() + "/missing.pem"}, "--egress-upstream-ca"},
		{[]string{"--exec=host", "--egress=on"}, "exec=host: commands share the host's network"},
	} {
		err := run(context.Background(), tc.args, io.Discard, io.Discard, nil)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("run %q = %v, want an error with %q", tc.args, err, tc.want)
		}
	}
	out := runBanner(t, "--exec=host", "--egress-host=api.example.test=127.0.0.1:8443")
	if !strings.Contains(out, "network:   policies NOT enforced (exec=host") {
		t.Errorf("banner: %s", out)
	}
}

// TestRunEgressJWKS checks that, where policies are enforced, the emulator
// serves the keys of its forward tokens at its own URL (their issuer).
func TestRunEgressJWKS(t *testing.T) {
	r, err := sandboxruntime.NewRunner(sandboxruntime.ModeNamespace, sandboxruntime.RunnerOptions{})
	if err != nil {
		t.Skipf("exec mode namespace unavailable: %v", err)
	}
	if ok, why := r.NetworkIsolation(); !ok {
		t.Skipf("network isolation unavailable: %s", why)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ready := make(chan string, 1)
	done := make(chan error, 1)
	var out syncBuf
	go func() { done <- run(ctx, []string{"--exec=namespace", "--egress=on"}, &out, io.Discard, ready) }()
	var url string
	select {
	case url = <-ready:
	case err := <-done:
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "network:   policies enforced") {
		t.Errorf("banner: %s", out.String())
	}
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	res, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Get(url + "/.well-known/jwks")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || !strings.Contains(string(b), `"keys"`) {
		t.Fatalf("jwks: %d %s", res.StatusCode, b)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// runBanner runs the emulator with args until it is ready and returns its banner.
func runBanner(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	done := make(chan error, 1)
	var out syncBuf
	go func() { done <- run(ctx, args, &out, io.Discard, ready) }()
	select {
	case <-ready:
	case err := <-done:
		cancel()
		t.Fatal(err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	return out.String()
}
