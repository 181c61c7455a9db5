package e2e

import (
	"context"
	"crypto"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
	"github.com/getsentry/sandbox-controller/internal/vercel"
	"github.com/getsentry/sandbox-controller/localstack/emulator"
	"github.com/getsentry/sandbox-controller/localstack/emulator/sandboxruntime"
)

// egressEnforcement is what TestEgressCanary runs with. Set it to
// emulator.EgressOff once to see every check below fail: the canary then
// comes from the sandbox's own network, not from a policy.
const egressEnforcement = emulator.EgressOn

// upstream is an HTTPS server standing for a provider's API: it records the
// requests it gets. Its certificate is Go's test certificate, valid for
// example.com and *.example.com, so the emulator's egress proxy verifies it
// under those names (Options.Hosts maps them to loopback: nothing leaves
// the machine).
type upstream struct {
	srv  *httptest.Server
	mu   sync.Mutex
	seen []seenRequest
}

type seenRequest struct {
	method, path, authorization, forwardedHost, token string
}

func newUpstream(t *testing.T) *upstream {
	u := &upstream{}
	u.srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.mu.Lock()
		u.seen = append(u.seen, seenRequest{method: r.Method, path: r.URL.Path, authorization: r.Header.Get("Authorization"),
			forwardedHost: r.Header.Get("Vercel-Forwarded-Host"), token: r.Header.Get("Vercel-Sandbox-Oidc-Token")})
		u.mu.Unlock()
		_, _ = io.WriteString(w, "upstream-answered")
	}))
	t.Cleanup(u.srv.Close)
	return u
}

func (u *upstream) requests() []seenRequest {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]seenRequest(nil), u.seen...)
}

// TestEgressCanary proves Junior's credential isolation end to end, through
// the deployed operator and the real kubectl: a canary credential put in a
// Secret behind a transform rule reaches the upstream and appears nowhere
// inside the sandbox, nor in a snapshot of it, in status, events or the
// manager's log; a match limits the transform to POST /v1/*, a trailing
// response rule denies the rest of the domain, an allowlist blocks another
// domain, forwardURL reaches a broker with a verifiable identity token, a
// rotated Secret reaches the next request, and DenyAll blocks everything.
func TestEgressCanary(t *testing.T) {
	if r, err := sandboxruntime.NewRunner(sandboxruntime.ModeNamespace, sandboxruntime.RunnerOptions{}); err != nil {
		t.Skipf("exec mode namespace unavailable (%v): the emulator cannot enforce network policies here", err)
	} else if ok, why := r.NetworkIsolation(); !ok {
		t.Skipf("network isolation unavailable: %s", why)
	}
	api, broker := newUpstream(t), newUpstream(t)
	roots := x509.NewCertPool()
	roots.AddCert(api.srv.Certificate())
	e := newEnv(t, envOptions{noManager: true, egress: emulator.EgressOptions{
		Enforcement: egressEnforcement,
		Hosts: map[string]string{
			"api.example.com":    api.srv.Listener.Addr().String(),
			"other.example.com":  api.srv.Listener.Addr().String(),
			"broker.example.com": broker.srv.Listener.Addr().String(),
			// The proxy resolves a domain when the sandbox connects, even
			// one whose rules forward every request (emulator-gaps.md).
			"git.example.com": api.srv.Listener.Addr().String(),
		},
		UpstreamRoots: roots,
	}})
	mgr := e.startManager("manager")
	const ns = "egress"
	canary := "Bearer canary-" + randomHex(t, 12)
	rotated := "Bearer rotated-" + randomHex(t, 12)
	brokerURL := "https://broker.example.com/egress/tok-" + randomHex(t, 12)
	kubectl := func(args ...string) string {
		t.Helper()
		out, err := e.kubectl(args...)
		if err != nil {
			t.Fatalf("kubectl %s: %v\n%s", args[0], err, out)
		}
		return out
	}
	secretFrom := func(name, key, value string) {
		t.Helper()
		f := filepath.Join(t.TempDir(), key)
		must(t, os.WriteFile(f, []byte(value), 0o600))
		manifest, err := e.kubectl("create", "secret", "generic", name, "-n", ns, "--from-file="+key+"="+f, "--dry-run=client", "-o", "yaml")
		must(t, err)
		e.apply(manifest)
	}

	kubectl("create", "namespace", ns)
	secretFrom("canary", "token", canary)
	secretFrom("broker", "url", brokerURL)
	e.apply(`apiVersion: sandbox.sentry.io/v1alpha1
kind: Sandbox
metadata:
  name: agent
  namespace: egress
spec:
  source: {runtime: node24}
  networkPolicy:
    mode: Allowlist
    allow:
    - domain: api.example.com
      rules:
      - match: {methods: [POST], path: {startsWith: /v1/}}
        transform:
          headers:
          - name: Authorization
            valueFrom: {secretKeyRef: {name: canary, key: token}}
      - response: {statusCode: 403, body: "denied by policy", contentType: text/plain}
    - domain: git.example.com
      rules:
      - forwardURL:
          valueFrom: {secretKeyRef: {name: broker, key: url}}
`)
	kubectl("wait", "-n", ns, "sandbox/agent", "--for=condition=Ready", "--timeout=90s")
	var sbx sandboxv1.Sandbox
	must(t, e.client.Get(e.ctx, client.ObjectKey{Namespace: ns, Name: "agent"}, &sbx))
	vc, err := vercel.New(vercel.Config{BaseURL: e.emuURL, Token: e.emu.Token(), TeamID: teamID, ProjectID: projectID})
	must(t, err)
	run := func(script string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(e.ctx, time.Minute)
		defer cancel()
		cmd, err := vc.RunCommand(ctx, sbx.Status.SessionID, vercel.RunCommandRequest{Command: "sh", Args: []string{"-c", script}})
		must(t, err)
		stdout, stderr, err := vc.ReadAllLogs(ctx, sbx.Status.SessionID, cmd.ID)
		must(t, err)
		return stdout + stderr
	}
	// curl prints the answer's status after its body; -sS keeps errors.
	const curl = "curl -sS --max-time 10 -w ' %{http_code}\\n' "

	t.Run("transform sends the canary upstream for POST /v1/* only", func(t *testing.T) {
		out := run(curl + "-X POST https://api.example.com/v1/issues; " + curl + "https://api.example.com/v1/issues; " + curl + "-X POST https://api.example.com/v2/issues")
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if len(lines) != 3 || lines[0] != "upstream-answered 200" || lines[1] != "denied by policy 403" || lines[2] != "denied by policy 403" {
			t.Fatalf("curl from inside the sandbox printed %q; want the upstream's answer for POST /v1/, then the response rule's 403 twice", out)
		}
		got := api.requests()
		if len(got) != 1 || got[0].method != http.MethodPost || got[0].path != "/v1/issues" || got[0].authorization != canary {
			t.Errorf("the upstream saw %d requests (method, path, authorization is the canary: %v); want exactly the POST /v1/issues with the canary",
				len(got), summarize(got, canary))
		}
	})

	t.Run("the allowlist blocks another domain, fast, with the proxy's answer", func(t *testing.T) {
		start := time.Now()
		out := run(curl + "https://other.example.com/; " + curl + "http://other.example.com/")
		if took := time.Since(start); took > 5*time.Second {
			t.Errorf("blocking took %s", took)
		}
		if !strings.Contains(out, "403") || !strings.Contains(out, "network policy blocks other.example.com") {
			t.Errorf("curl to a domain outside the allowlist printed %q; want the proxy's 403", out)
		}
		if n := len(api.requests()); n != 1 {
			t.Errorf("the upstream behind other.example.com saw %d requests, want only the earlier 1", n)
		}
	})

	t.Run("forwardURL reaches the broker with the sandbox's identity", func(t *testing.T) {
		out := run(curl + "-X POST https://git.example.com/repos/x/pulls")
		if !strings.HasPrefix(out, "upstream-answered 200") {
			t.Fatalf("curl to the forwarded domain printed %q; want the broker's answer", out)
		}
		got := broker.requests()
		if len(got) != 1 || got[0].forwardedHost != "git.example.com" || !strings.HasSuffix(got[0].path, "/repos/x/pulls") || got[0].token == "" {
			t.Fatalf("the broker saw %v; want one request for git.example.com's /repos/x/pulls with an identity token", summarize(got, canary))
		}
		claims := verifiedClaims(t, e.emuURL, got[0].token)
		if claims["sandbox_name"] != sbx.Status.VercelName || claims["team_id"] != teamID || claims["project_id"] != projectID || claims["aud"] != strings.TrimSuffix(brokerURL, "/") {
			t.Errorf("the token's claims %v do not name this sandbox (%s), team, project and the broker URL as audience", redactAud(claims), sbx.Status.VercelName)
		}
	})

	t.Run("the canary is nowhere inside the sandbox", func(t *testing.T) {
		marker := strings.TrimPrefix(canary, "Bearer ")
		out := run(fmt.Sprintf(`env; cat /proc/*/environ 2>/dev/null | tr '\0' '\n'; grep -rl %q / --exclude-dir=proc --exclude-dir=sys --exclude-dir=dev --exclude-dir=usr --exclude-dir=lib --exclude-dir=lib64 --exclude-dir=bin --exclude-dir=sbin 2>/dev/null; echo scanned`, marker))
		if !strings.Contains(out, "scanned") {
			t.Fatalf("the scan did not finish: %q", out)
		}
		// The command line of this very scan names the marker; nothing else may.
		if n := strings.Count(out, marker); n > 2 {
			t.Errorf("the canary appears %d times inside the sandbox (env, /proc/*/environ, files), want only in the scan's own command line", n)
		}
	})

	t.Run("rotation reaches the next request", func(t *testing.T) {
		secretFrom("canary", "token", rotated)
		start := time.Now()
		for {
			_ = run(curl + "-X POST https://api.example.com/v1/rotate")
			got := api.requests()
			if last := got[len(got)-1]; last.authorization == rotated {
				t.Logf("the rotated Secret reached the upstream %s after the update", time.Since(start).Round(100*time.Millisecond))
				break
			}
			if time.Since(start) > 30*time.Second {
				t.Fatalf("30 s after the Secret's update the upstream still gets the old value")
			}
			time.Sleep(500 * time.Millisecond)
		}
	})

	t.Run("DenyAll blocks everything, fast", func(t *testing.T) {
		kubectl("patch", "-n", ns, "sandbox/agent", "--type=merge", "-p", `{"spec":{"networkPolicy":{"mode":"DenyAll","allow":null}}}`)
		before := len(api.requests())
		deadline := time.Now().Add(30 * time.Second)
		for {
			must(t, e.client.Get(e.ctx, client.ObjectKey{Namespace: ns, Name: "agent"}, &sbx))
			start := time.Now()
			// HTTPS: curl shows the refused CONNECT; plain HTTP: the body.
			out := run(curl + "-X POST https://api.example.com/v1/issues; " + curl + "http://api.example.com/")
			if strings.Contains(out, "CONNECT tunnel failed, response 403") && strings.Contains(out, "network policy blocks api.example.com") {
				if took := time.Since(start); took > 5*time.Second {
					t.Errorf("blocking took %s", took)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("30 s after the change to DenyAll curl still printed %q", out)
			}
			time.Sleep(500 * time.Millisecond)
		}
		if n := len(api.requests()) - before; n > 1 {
			t.Errorf("the upstream got %d requests while the change was applied, want at most the one in flight", n)
		}
	})

	t.Run("a snapshot of the sandbox holds no canary", func(t *testing.T) {
		e.apply(`apiVersion: sandbox.sentry.io/v1alpha1
kind: SandboxSnapshot
metadata:
  name: agent-now
  namespace: egress
spec:
  source:
    sandboxRef: {name: agent}
`)
		kubectl("wait", "-n", ns, "sandboxsnapshot/agent-now", "--for=condition=Ready", "--timeout=90s")
		for _, v := range []string{canary, rotated, brokerURL} {
			if hits := grepTree(t, e.emuDataDir, strings.TrimPrefix(v, "Bearer ")); len(hits) > 0 {
				t.Errorf("a credential is stored in the emulator's data (snapshots, sessions): %v", hits)
			}
		}
	})

	// Status, events and the manager's log: none holds a credential.
	for _, v := range []string{canary, rotated, brokerURL} {
		marker := strings.TrimPrefix(v, "Bearer ")
		if strings.Contains(kubectl("get", "-n", ns, "sandbox,sandboxsnapshot", "-o", "yaml"), marker) {
			t.Error("a credential appears in a Sandbox's or SandboxSnapshot's YAML")
		}
		if strings.Contains(kubectl("get", "events", "-n", ns, "-o", "yaml"), marker) {
			t.Error("a credential appears in an event")
		}
		if strings.Contains(mgr.Log(), marker) {
			t.Error("a credential appears in the manager's log")
		}
	}
}

// summarize describes requests without printing a credential.
func summarize(rs []seenRequest, canary string) []string {
	var out []string
	for _, r := range rs {
		out = append(out, fmt.Sprintf("%s %s (authorization is the canary: %t)", r.method, r.path, r.authorization == canary))
	}
	return out
}

// redactAud drops the audience (the broker URL, a credential) from claims.
func redactAud(claims map[string]any) map[string]any {
	c := map[string]any{}
	for k, v := range claims {
		if k != "aud" {
			c[k] = v
		}
	}
	return c
}

// grepTree returns the files under dir whose contents contain s.
func grepTree(t *testing.T, dir, s string) []string {
	t.Helper()
	var hits []string
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return nil
		}
		b, err := os.ReadFile(p)
		if err == nil && strings.Contains(string(b), s) {
			hits = append(hits, p)
		}
		return nil
	})
	must(t, err)
	return hits
}

// verifiedClaims checks token's RS256 signature against the emulator's key
// set (<emulator URL>/.well-known/jwks, where a broker fetches it) and
// returns its claims.
func verifiedClaims(t *testing.T, emuURL, token string) map[string]any {
	t.Helper()
	res, err := http.Get(emuURL + "/.well-known/jwks")
	must(t, err)
	defer res.Body.Close()
	jwks, err := io.ReadAll(res.Body)
	must(t, err)
	claims, err := verifyRS256(jwks, token)
	if err != nil {
		t.Fatalf("the broker's token does not verify against the emulator's JWKS: %v", err)
	}
	return claims
}

// verifyRS256 verifies a JWT's RS256 signature with the key of jwks its
// header names, and its expiry, and returns its claims.
func verifyRS256(jwks []byte, token string) (map[string]any, error) {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return nil, errors.New("not a JWT")
	}
	var header struct{ Alg, Kid string }
	if err := decodeSegment(parts[0], &header); err != nil || header.Alg != "RS256" {
		return nil, fmt.Errorf("header: alg %q, %v", header.Alg, err)
	}
	var set struct {
		Keys []struct{ Kty, Kid, N, E string }
	}
	if err := json.Unmarshal(jwks, &set); err != nil {
		return nil, fmt.Errorf("JWKS: %w", err)
	}
	for _, k := range set.Keys {
		if k.Kty != "RSA" || k.Kid != header.Kid {
			continue
		}
		n, errN := base64.RawURLEncoding.DecodeString(k.N)
		e, errE := base64.RawURLEncoding.DecodeString(k.E)
		sig, errS := base64.RawURLEncoding.DecodeString(parts[2])
		if err := errors.Join(errN, errE, errS); err != nil {
			return nil, err
		}
		pub := &rsa.PublicKey{N: new(big.Int).SetBytes(n), E: int(new(big.Int).SetBytes(e).Int64())}
		digest := sha256.Sum256([]byte(parts[0] + "." + parts[1]))
		if err := rsa.VerifyPKCS1v15(pub, crypto.SHA256, digest[:], sig); err != nil {
			return nil, err
		}
		var claims map[string]any
		if err := decodeSegment(parts[1], &claims); err != nil {
			return nil, err
		}
		if exp, ok := claims["exp"].(float64); !ok || time.Unix(int64(exp), 0).Before(time.Now()) {
			return nil, fmt.Errorf("expired or no exp: %v", claims["exp"])
		}
		return claims, nil
	}
	return nil, fmt.Errorf("no RSA key %q in the JWKS", header.Kid)
}

func decodeSegment(seg string, v any) error {
	b, err := base64.RawURLEncoding.DecodeString(seg)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}
