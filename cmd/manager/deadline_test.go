package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
	"github.com/getsentry/sandbox-controller/localstack"
	"github.com/getsentry/sandbox-controller/localstack/emulator"
)

// TestBlackHoledVercelCallsDoNotWedgeTheManager runs the manager binary with
// one Vercel in-flight slot against the emulator behind a proxy that never
// answers the calls of one Sandbox. Those calls end at --vercel-call-timeout
// and give the slot back, so another Sandbox still becomes Ready, the stuck
// one is retried, and /healthz — which includes the stalled-slots check —
// stays healthy: nothing is held past --vercel-stall-threshold.
func TestBlackHoledVercelCallsDoNotWedgeTheManager(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	stack, kubeconfig := startStack(ctx, t, emulator.Options{})

	// The proxy: every request naming "-stuck-" (path or body) waits until
	// the client gives up.
	target, _ := url.Parse(stack.EmulatorURL)
	rp := httputil.NewSingleHostReverseProxy(target)
	var stuckCalls, stuckEnded atomic.Int64
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		if strings.Contains(r.URL.Path, "-stuck-") || bytes.Contains(body, []byte("-stuck-")) {
			stuckCalls.Add(1)
			<-r.Context().Done()
			stuckEnded.Add(1)
			return
		}
		rp.ServeHTTP(w, r)
	}))
	defer proxy.Close()

	probeAddr := freeAddr(t)
	var out syncBuffer
	cmd := exec.CommandContext(ctx, os.Args[0],
		"--kubeconfig="+kubeconfig,
		"--metrics-bind-address=0",
		"--health-probe-bind-address="+probeAddr,
		"--vercel-api-url="+proxy.URL,
		"--vercel-team-id="+localstack.TeamID,
		"--vercel-project-id="+localstack.ProjectID,
		"--vercel-max-in-flight=1",
		"--vercel-reserved-in-flight=0",
		"--vercel-call-timeout=2s",
		"--vercel-stall-threshold=3s",
		"--reconcile-timeout=10s",
		"--backoff-cap=2s",
		"--poll-interval=5s",
	)
	cmd.Env = append(filteredEnv("VERCEL_TOKEN"), "RUN_MANAGER_MAIN=1", "VERCEL_TOKEN="+stack.Emulator.Token())
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("manager output:\n%s", out.String())
		}
	}()
	healthz := func() (int, string) {
		resp, err := http.Get("http://" + probeAddr + "/healthz?verbose")
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	waitFor(t, 30*time.Second, "the manager's /healthz", func() bool { code, _ := healthz(); return code == 200 })
	if _, body := healthz(); !strings.Contains(body, "[+]vercel-in-flight ok") {
		t.Errorf("/healthz lacks the stalled-slots check:\n%s", body)
	}

	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "deadlines"}}
	if err := stack.Client.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	node := sandboxv1.Runtime("node24")
	for _, name := range []string{"stuck", "fine"} {
		sbx := &sandboxv1.Sandbox{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: name},
			Spec:       sandboxv1.SandboxSpec{Source: sandboxv1.SandboxSource{Runtime: &node}},
		}
		if err := stack.Client.Create(ctx, sbx); err != nil {
			t.Fatal(err)
		}
		if name == "stuck" {
			waitFor(t, 30*time.Second, "the stuck Sandbox's first Vercel call", func() bool { return stuckCalls.Load() > 0 })
		}
	}

	start := time.Now()
	var unhealthy []string
	ready := func() bool {
		if code, body := healthz(); code != 200 {
			unhealthy = append(unhealthy, fmt.Sprintf("%s: %d %s", time.Since(start).Round(time.Second), code, body))
		}
		sbx := &sandboxv1.Sandbox{}
		if err := stack.Client.Get(ctx, types.NamespacedName{Namespace: ns.Name, Name: "fine"}, sbx); err != nil {
			return false
		}
		return meta.IsStatusConditionTrue(sbx.Status.Conditions, sandboxv1.ConditionReady)
	}
	waitFor(t, 45*time.Second, "the other Sandbox to become Ready", ready)
	t.Logf("the other Sandbox was Ready %s after it was created; %d black-holed calls, %d ended by the client",
		time.Since(start).Round(100*time.Millisecond), stuckCalls.Load(), stuckEnded.Load())
	// The stuck Sandbox keeps being retried, each call ending at its
	// deadline, and the probe stays healthy meanwhile.
	waitFor(t, 30*time.Second, "the stuck Sandbox's calls to be retried", func() bool {
		if code, body := healthz(); code != 200 {
			unhealthy = append(unhealthy, fmt.Sprintf("%s: %d %s", time.Since(start).Round(time.Second), code, body))
		}
		return stuckEnded.Load() >= 3
	})
	if len(unhealthy) > 0 {
		t.Errorf("/healthz failed while calls were black-holed: %q", unhealthy)
	}
}

func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
