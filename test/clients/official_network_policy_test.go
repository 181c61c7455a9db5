package clients

import (
	"context"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/getsentry/sandbox-controller/localstack/emulator"
	"github.com/getsentry/sandbox-controller/localstack/emulator/sandboxruntime"
	"github.com/getsentry/sandbox-controller/test/officialsdk"
)

// sdkPolicyEnforcement is what TestOfficialSDKNetworkPolicy runs the
// emulator with. Set it to emulator.EgressOff once to see every check of
// what curl met fail: commands then use the host's network, where the
// example.com names are not mapped to the loopback upstreams, and no policy
// applies.
const sdkPolicyEnforcement = emulator.EgressOn

// policyUpstream is a loopback HTTPS server standing for a provider's API or
// a forwardURL broker. Its certificate is Go's test certificate, valid for
// example.com and *.example.com. It records what it got and answers
// "upstream-answered"; it never echoes a header.
type policyUpstream struct {
	srv  *httptest.Server
	mu   sync.Mutex
	seen []policyRequest
}

type policyRequest struct {
	method, host, uri, authorization, forwardedHost, token string
}

func newPolicyUpstream(t *testing.T) *policyUpstream {
	u := &policyUpstream{}
	u.srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.mu.Lock()
		u.seen = append(u.seen, policyRequest{method: r.Method, host: r.Host, uri: r.URL.RequestURI(), authorization: r.Header.Get("Authorization"),
			forwardedHost: r.Header.Get("Vercel-Forwarded-Host"), token: r.Header.Get("Vercel-Sandbox-Oidc-Token")})
		u.mu.Unlock()
		_, _ = io.WriteString(w, "upstream-answered")
	}))
	t.Cleanup(u.srv.Close)
	return u
}

func (u *policyUpstream) requests() []policyRequest {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]policyRequest(nil), u.seen...)
}

// describeRequests lists requests without their credentials.
func describeRequests(rs []policyRequest, canary string) []string {
	var out []string
	for _, r := range rs {
		out = append(out, fmt.Sprintf("%s %s%s (authorization is the canary: %t, forwarded host %q, token: %t)",
			r.method, r.host, r.uri, r.authorization == canary, r.forwardedHost, r.token != ""))
	}
	return out
}

// curlResult is one curl run inside the sandbox by testdata/network-policy.mjs.
type curlResult struct {
	Label, Body, Status, Connect, PolicyHeader, Stderr string
	ExitCode                                           int
}

func (c curlResult) String() string {
	return fmt.Sprintf("%s: exit %d, status %s, CONNECT %s, x-policy %q, body %q, stderr %q",
		c.Label, c.ExitCode, c.Status, c.Connect, c.PolicyHeader, c.Body, c.Stderr)
}

// TestOfficialSDKNetworkPolicy shows the official SDK's own network-policy
// calls taking effect from inside a sandbox of the emulator: @vercel/sandbox
// 3.5 creates a sandbox with an allowlist, then calls updateNetworkPolicy
// with a match+transform rule, a trailing response rule and a forwardURL
// rule, then "deny-all", and after each call curl in the sandbox (through
// runCommand) meets the policy: the proxy's 403 for what is not allowed, a
// canary header on POST /v1/* only, the response rule's answer for the rest
// of the domain, the broker with the sandbox's identity for the forwarded
// domain. Upstreams are loopback servers under example.com names.
func TestOfficialSDKNetworkPolicy(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the official SDK in Node.js")
	}
	if r, err := sandboxruntime.NewRunner(sandboxruntime.ModeNamespace, sandboxruntime.RunnerOptions{}); err != nil {
		t.Skipf("exec mode namespace unavailable (%v): the emulator cannot enforce network policies here", err)
	} else if ok, why := r.NetworkIsolation(); !ok {
		t.Skipf("network isolation unavailable: %s", why)
	}
	modules := installOfficialClients(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	api, broker := newPolicyUpstream(t), newPolicyUpstream(t)
	roots := x509.NewCertPool()
	roots.AddCert(api.srv.Certificate())
	e, err := emulator.New(emulator.Options{DataDir: t.TempDir(), Exec: "namespace", Egress: emulator.EgressOptions{
		Enforcement: sdkPolicyEnforcement,
		Hosts: map[string]string{
			"api.example.com":    api.srv.Listener.Addr().String(),
			"other.example.com":  api.srv.Listener.Addr().String(),
			"broker.example.com": broker.srv.Listener.Addr().String(),
			// The proxy resolves the forwarded domain when the sandbox
			// connects; a request that reached it would show at api.
			"git.example.com": api.srv.Listener.Addr().String(),
		},
		UpstreamRoots: roots,
	}})
	must(t, err)
	apiURL, err := e.Start("")
	must(t, err)
	t.Cleanup(func() {
		if err := e.Close(); err != nil {
			t.Errorf("close the emulator: %v", err)
		}
	})

	canary := "Bearer canary-" + hex.EncodeToString(randomBytes(t, 12))
	brokerURL := "https://broker.example.com/egress/tok-" + hex.EncodeToString(randomBytes(t, 8))
	name := "sdk-netpol-" + hex.EncodeToString(randomBytes(t, 4))
	cmd := exec.CommandContext(ctx, "node", filepath.Join(repoRoot, "test", "clients", "testdata", "network-policy.mjs"))
	cmd.Env = append(os.Environ(), officialsdk.NodeEnv(repoRoot, modules, apiURL, e.Token(), t.TempDir())...)
	cmd.Env = append(cmd.Env, "VERCEL_TOKEN="+e.Token(), "VERCEL_TEAM_ID=team_emulator", "VERCEL_PROJECT_ID=prj_emulator",
		"SANDBOX_NAME="+name, "CANARY="+canary, "BROKER_URL="+brokerURL)
	cmd.Dir = filepath.Dir(modules)
	stdout, err := cmd.Output()
	var stderr string
	if ee, ok := err.(*exec.ExitError); ok {
		stderr = string(ee.Stderr)
	}
	marker := strings.TrimPrefix(canary, "Bearer ")
	if strings.Contains(string(stdout)+stderr, marker) {
		t.Fatalf("network-policy.mjs printed the canary: the SDK or the emulator returned the transform's value")
	}
	if err != nil {
		t.Fatalf("network-policy.mjs: %v\nstdout: %s\nstderr: %s", err, stdout, stderr)
	}
	var got struct {
		Created, Updated, DenyAll json.RawMessage
		Before, After, Denied     []curlResult
	}
	must(t, json.Unmarshal(stdout, &got))
	t.Logf("policy after create: %s\nafter updateNetworkPolicy: %s\nafter updateNetworkPolicy(\"deny-all\"): %s",
		got.Created, strings.ReplaceAll(string(got.Updated), brokerURL, "<broker URL>"), got.DenyAll)
	for _, phase := range []struct {
		name string
		rs   []curlResult
	}{{"before", got.Before}, {"after", got.After}, {"deny-all", got.Denied}} {
		for _, r := range phase.rs {
			t.Logf("%s: %s", phase.name, r)
		}
	}
	if len(got.Before) != 2 || len(got.After) != 6 || len(got.Denied) != 3 {
		t.Fatalf("network-policy.mjs ran %d, %d, %d curls; want 2, 6, 3", len(got.Before), len(got.After), len(got.Denied))
	}

	// What the SDK reports back (from the emulator's answer). The transform's
	// value comes back as "<redacted>" (checked above: never the canary). The
	// trailing response rule does not come back at all: the API's answer form
	// has no response rules (docs/dev/vercel-sandbox-api.md §3.6 C) and the
	// SDK's fromAPINetworkPolicy reads only injectionRules and forwardRules.
	if string(got.Created) != `{"allow":["other.example.com"]}` || string(got.DenyAll) != `"deny-all"` ||
		!strings.Contains(string(got.Updated), `"transform":[{"headers":{"authorization":"<redacted>"}}]`) ||
		!strings.Contains(string(got.Updated), `"git.example.com":[{"forwardURL":`) {
		t.Errorf("the policies the SDK returned (logged above) are not the ones it set")
	}

	// blocked: the proxy refused the CONNECT (https) or answered 403 (http).
	blocked := func(r curlResult, host string) bool {
		if r.Connect == "403" {
			return r.ExitCode != 0 && strings.Contains(r.Stderr, "CONNECT tunnel failed, response 403")
		}
		return r.Status == "403" && strings.Contains(r.Body, "network policy blocks "+host)
	}
	upstream := func(r curlResult) bool {
		return r.ExitCode == 0 && r.Status == "200" && r.Body == "upstream-answered"
	}

	// Before the update: create's allowlist holds.
	if r := got.Before[0]; !blocked(r, "api.example.com") {
		t.Errorf("before updateNetworkPolicy, a domain outside create's allowlist: %s; want the proxy's 403", r)
	}
	if r := got.Before[1]; !upstream(r) {
		t.Errorf("before updateNetworkPolicy, the domain create's allowlist names: %s; want the upstream's answer", r)
	}

	// After the update.
	if r := got.After[0]; !upstream(r) {
		t.Errorf("POST /v1/ after the update: %s; want the upstream's answer", r)
	}
	for _, r := range got.After[1:3] {
		if r.ExitCode != 0 || r.Status != "403" || r.Body != "denied by the response rule" || r.PolicyHeader != "trailing-rule" {
			t.Errorf("%s; want the response rule's 403, body and x-policy header", r)
		}
	}
	if r := got.After[3]; !upstream(r) {
		t.Errorf("the forwarded domain: %s; want the broker's answer", r)
	}
	for _, r := range got.After[4:6] {
		if !blocked(r, "other.example.com") {
			t.Errorf("a domain the update dropped: %s; want the proxy's 403", r)
		}
	}
	// The upstreams, after the script: before deny-all, as after it.
	apiSeen := api.requests()
	if len(apiSeen) != 2 || apiSeen[0].method != http.MethodGet || apiSeen[0].host != "other.example.com" || apiSeen[0].authorization != "" ||
		apiSeen[1].method != http.MethodPost || apiSeen[1].host != "api.example.com" || apiSeen[1].uri != "/v1/issues" || apiSeen[1].authorization != canary {
		t.Errorf("the api upstream saw %v; want other.example.com's GET / before the update, then exactly api.example.com's POST /v1/issues with the canary",
			describeRequests(apiSeen, canary))
	}
	brokerSeen := broker.requests()
	brokerPath := strings.TrimPrefix(brokerURL, "https://broker.example.com")
	if len(brokerSeen) != 1 || brokerSeen[0].method != http.MethodPost || brokerSeen[0].uri != brokerPath+"/repos/x/pulls?state=open" ||
		brokerSeen[0].forwardedHost != "git.example.com" || brokerSeen[0].token == "" || brokerSeen[0].authorization != "" {
		t.Errorf("the broker saw %d requests; want one POST <forward URL path>/repos/x/pulls?state=open for git.example.com with a token and no authorization", len(brokerSeen))
	} else if claims := jwtClaims(t, brokerSeen[0].token); claims["sandbox_name"] != name || claims["team_id"] != "team_emulator" ||
		claims["project_id"] != "prj_emulator" || claims["aud"] != brokerURL || claims["iss"] != apiURL {
		audOK := claims["aud"] == brokerURL
		delete(claims, "aud") // the forward URL carries a token of its own
		t.Errorf("the forward token's claims %v (aud is the forward URL: %t) do not name sandbox %s, the team, the project and the emulator",
			claims, audOK, name)
	}

	// deny-all.
	for i, host := range []string{"api.example.com", "git.example.com", "api.example.com"} {
		if r := got.Denied[i]; !blocked(r, host) {
			t.Errorf("after updateNetworkPolicy(\"deny-all\"): %s; want the proxy's 403", r)
		}
	}
}

// jwtClaims decodes a JWT's claims without verifying it (TestOfficialSandboxProxy
// and test/e2e's TestEgressCanary verify the proxy's tokens).
func jwtClaims(t *testing.T, token string) map[string]any {
	t.Helper()
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		t.Fatalf("the forward token is not a JWT")
	}
	b, err := base64.RawURLEncoding.DecodeString(parts[1])
	must(t, err)
	var claims map[string]any
	must(t, json.Unmarshal(b, &claims))
	return claims
}
