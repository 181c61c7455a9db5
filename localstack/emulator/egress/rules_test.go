package egress_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/getsentry/sandbox-controller/localstack/emulator/egress"
)

const canary = "canary-7f3a9c1e-secret"

// TestTransformInjectsHeader: the transform header reaches the upstream over
// HTTPS (the proxy terminates TLS with its CA) and replaces the value the
// sandbox sent; neither the sandbox's answer nor the logs carry it.
func TestTransformInjectsHeader(t *testing.T) {
	ca := newUpstreamCA(t)
	up := newUpstream(t, ca, true, "api.example.com")
	pol := fmt.Sprintf(`{"allow":{"api.example.com":[{"transform":[{"headers":{"Authorization":"Bearer %s"}}]}]}}`, canary)
	h := start(t, egress.Options{Hosts: map[string]string{"api.example.com": up.addr()}}, newSession(t, pol), ca)

	code, body := do(t, h.client(t), "GET", "https://api.example.com/v1/user", map[string]string{"Authorization": "Bearer sandbox-guess"}, "")
	if code != 200 || strings.Contains(body, canary) {
		t.Fatalf("Go client: %d %q", code, body)
	}
	ccode, cbody, stderr, exit := h.curl(t, "-H", "authorization: Bearer from-curl", "-H", "Proxy-Authorization: Basic Zm9vOmJhcg==",
		"https://api.example.com/v1/curl")
	if exit != 0 || ccode != "200" || cbody != "upstream api.example.com /v1/curl" {
		t.Fatalf("curl: exit %d code %s body %q stderr %q", exit, ccode, cbody, stderr)
	}
	reqs := up.requests()
	if len(reqs) != 2 {
		t.Fatalf("upstream saw %d requests, want 2", len(reqs))
	}
	checkInjected(t, reqs)
	if strings.Contains(h.logs.all(), canary) || strings.Contains(cbody+stderr, canary) {
		t.Errorf("the secret leaked into logs or curl's output")
	}
	if !strings.Contains(h.logs.all(), "terminated TLS for api.example.com") {
		t.Errorf("logs do not show the termination: %s", h.logs.all())
	}
}

// TestTransformFormA: form A's injectionRules are transforms too, with match.
func TestTransformFormA(t *testing.T) {
	up := newUpstream(t, nil, false, "api.example.com")
	pol := fmt.Sprintf(`{"mode":"custom","allowedDomains":["api.example.com"],
		"injectionRules":[{"domain":"api.example.com","headers":{"X-Key":"%s"},"match":{"path":{"exact":"/k"}}}]}`, canary)
	h := start(t, egress.Options{Hosts: map[string]string{"api.example.com": up.addr()}}, newSession(t, pol), nil)
	c := h.client(t)
	do(t, c, "GET", "http://api.example.com/k", nil, "")
	do(t, c, "GET", "http://api.example.com/other", map[string]string{"X-Key": "mine"}, "")
	reqs := up.requests()
	if len(reqs) != 2 || reqs[0].Header.Get("X-Key") != canary || reqs[1].Header.Get("X-Key") != "mine" {
		t.Fatalf("upstream saw %+v", reqs)
	}
}

// TestMatchThenResponse: only POST /v1/* goes through the transform; a
// trailing response rule answers everything else from the proxy.
func TestMatchThenResponse(t *testing.T) {
	ca := newUpstreamCA(t)
	up := newUpstream(t, ca, true, "api.example.com")
	pol := fmt.Sprintf(`{"allow":{"api.example.com":[
		{"match":{"method":["POST"],"path":{"startsWith":"/v1/"}},"transform":[{"headers":{"Authorization":"Bearer %s"}}]},
		{"response":{"statusCode":403,"headers":{"X-Why":"policy"},"body":"only POST /v1/ is allowed","contentType":"text/plain"}}]}}`, canary)
	h := start(t, egress.Options{Hosts: map[string]string{"api.example.com": up.addr()}}, newSession(t, pol), ca)
	c := h.client(t)

	if code, body := do(t, c, "POST", "https://api.example.com/v1/chat", nil, "hi"); code != 200 || body != "upstream api.example.com /v1/chat" {
		t.Fatalf("POST /v1/chat: %d %q", code, body)
	}
	for _, mp := range [][2]string{{"GET", "/v1/chat"}, {"POST", "/v2/chat"}, {"POST", "/v1"}} {
		if code, body := do(t, c, mp[0], "https://api.example.com"+mp[1], nil, ""); code != 403 || body != "only POST /v1/ is allowed" {
			t.Errorf("%s %s: %d %q, want the response rule", mp[0], mp[1], code, body)
		}
	}
	curlMatchThenResponse(t, h)
	reqs := up.requests()
	if len(reqs) != 2 || reqs[0].Body != "hi" || reqs[1].Path != "/v1/curl" {
		t.Fatalf("upstream saw %+v, want only the two POSTs to /v1/", reqs)
	}
	for _, r := range reqs {
		if r.Header.Get("Authorization") != "Bearer "+canary {
			t.Errorf("%s lacks the transform header", r.Path)
		}
	}
	// A dot segment cannot turn a /v1/ request into another path.
	if code, _ := do(t, c, "POST", "https://api.example.com/v1/%2e%2e/admin", nil, ""); code != 400 {
		t.Errorf("dot segment: status %d, want 400", code)
	}
}

// TestMatchHeadersAndQuery: header and query matchers are ANDed, each a key
// and value matcher; an unmatched request passes unchanged.
func TestMatchHeadersAndQuery(t *testing.T) {
	up := newUpstream(t, nil, false, "api.example.com")
	pol := `{"allow":{"api.example.com":[{"match":{
		"headers":[{"key":{"exact":"x-api-key"},"value":{"exact":"placeholder"}}],
		"queryString":[{"key":{"exact":"v"},"value":{"regex":"^[0-9]+$"}}]},
		"transform":[{"headers":{"X-Api-Key":"real"}}]}]}}`
	h := start(t, egress.Options{Hosts: map[string]string{"api.example.com": up.addr()}}, newSession(t, pol), nil)
	c := h.client(t)
	cases := []struct {
		q, key, want string
	}{
		{"v=12", "placeholder", "real"},
		{"v=12a", "placeholder", "placeholder"},
		{"v=12", "other", "other"},
		{"w=12", "placeholder", "placeholder"},
	}
	for _, tc := range cases {
		if code, _ := do(t, c, "GET", "http://api.example.com/q?"+tc.q, map[string]string{"X-Api-Key": tc.key}, ""); code != 200 {
			t.Fatalf("%s: status %d", tc.q, code)
		}
	}
	reqs := up.requests()
	for i, tc := range cases {
		if got := reqs[i].Header.Get("X-Api-Key"); got != tc.want || reqs[i].Query != tc.q {
			t.Errorf("?%s with key %q: upstream got key %q query %q, want %q", tc.q, tc.key, got, reqs[i].Query, tc.want)
		}
	}
}

// TestPolicyUpdateAppliesToNextRequest: on a kept-alive connection the proxy
// reads (plain HTTP, terminated TLS) and on a raw tunnel, the request after
// an update meets the new policy.
func TestPolicyUpdateAppliesToNextRequest(t *testing.T) {
	ca := newUpstreamCA(t)
	up := newUpstream(t, ca, true, "api.example.com")
	plain := newUpstream(t, ca, false, "plain.example.com")
	hosts := map[string]string{"api.example.com": up.addr(), "plain.example.com": plain.addr()}
	for name, pol := range map[string]string{
		"tunnel":     `{"allow":["api.example.com","plain.example.com"]}`,
		"terminated": `{"allow":{"api.example.com":[{"transform":[{"headers":{"X-A":"1"}}]}],"plain.example.com":[]}}`,
	} {
		t.Run(name, func(t *testing.T) {
			h := start(t, egress.Options{Hosts: hosts}, newSession(t, pol), ca)
			c := h.client(t)
			for _, u := range []string{"https://api.example.com/1", "http://plain.example.com/1"} {
				if code, body := do(t, c, "GET", u, nil, ""); code != 200 {
					t.Fatalf("%s before the update: %d %q", u, code, body)
				}
			}
			h.sess.set(t, `{"allow":["other.example.com"]}`)
			if code, _ := do(t, c, "GET", "https://api.example.com/2", nil, ""); code == 200 {
				t.Errorf("https after the update: still 200")
			}
			if code, _ := do(t, c, "GET", "http://plain.example.com/2", nil, ""); code != 403 {
				t.Errorf("http after the update: %d, want 403", code)
			}
			for _, r := range append(up.requests(), plain.requests()...) {
				if strings.HasSuffix(r.Path, "/2") {
					t.Errorf("%s reached its upstream after the update", r.Path)
				}
			}
		})
	}
}

// checkInjected: each request carries exactly the policy's Authorization,
// the sandbox's Host and no proxy header.
func checkInjected(t *testing.T, reqs []seen) {
	t.Helper()
	for _, r := range reqs {
		if got := r.Header.Values("Authorization"); len(got) != 1 || got[0] != "Bearer "+canary {
			t.Errorf("%s: upstream Authorization = %q, want only the policy's value", r.Path, got)
		}
		if r.Header.Get("Proxy-Authorization") != "" || r.Header.Get("Proxy-Connection") != "" {
			t.Errorf("%s: proxy headers reached the upstream: %v", r.Path, r.Header)
		}
		if r.Host != "api.example.com" {
			t.Errorf("%s: Host %q", r.Path, r.Host)
		}
	}
}

// curlMatchThenResponse: curl meets the response rule, then the transform.
func curlMatchThenResponse(t *testing.T, h *harness) {
	t.Helper()
	ccode, cbody, _, exit := h.curl(t, "-X", "DELETE", "https://api.example.com/v1/chat")
	if exit != 0 || ccode != "403" || cbody != "only POST /v1/ is allowed" {
		t.Errorf("curl DELETE: exit %d code %s body %q", exit, ccode, cbody)
	}
	ccode, _, _, exit = h.curl(t, "-d", "x=1", "https://api.example.com/v1/curl")
	if exit != 0 || ccode != "200" {
		t.Errorf("curl POST /v1/curl: exit %d code %s", exit, ccode)
	}
}
