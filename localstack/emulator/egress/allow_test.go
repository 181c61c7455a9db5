package egress_test

import (
	"net"
	"strings"
	"testing"

	"github.com/getsentry/sandbox-controller/localstack/emulator/egress"
)

// TestDenyAll: every request and CONNECT gets the proxy's 403, for Go's
// client and for curl, and no upstream sees anything.
func TestDenyAll(t *testing.T) {
	ca := newUpstreamCA(t)
	up := newUpstream(t, ca, true, "api.example.com")
	plain := newUpstream(t, ca, false, "plain.example.com")
	h := start(t, egress.Options{Hosts: map[string]string{"api.example.com": up.addr(), "plain.example.com": plain.addr()}},
		newSession(t, `{"mode":"deny-all"}`), ca)
	c := h.client(t)

	if code, body := do(t, c, "GET", "https://api.example.com/x", nil, ""); code != 0 || !strings.Contains(body, "Forbidden") {
		t.Errorf("https through deny-all: %d %q, want the CONNECT refused with 403", code, body)
	}
	code, body := do(t, c, "GET", "http://plain.example.com/x", nil, "")
	if code != 403 || !strings.Contains(body, "network policy blocks plain.example.com") {
		t.Errorf("http through deny-all: %d %q", code, body)
	}
	ccode, _, stderr, exit := h.curl(t, "https://api.example.com/x")
	if exit == 0 || !strings.Contains(stderr, "403") {
		t.Errorf("curl https through deny-all: exit %d code %s stderr %q, want a failed CONNECT naming 403", exit, ccode, stderr)
	}
	ccode, cbody, _, exit := h.curl(t, "http://plain.example.com/x")
	if exit != 0 || ccode != "403" || !strings.Contains(cbody, "The sandbox's network policy blocks plain.example.com") {
		t.Errorf("curl http through deny-all: exit %d code %s body %q", exit, ccode, cbody)
	}
	if n := len(up.requests()) + len(plain.requests()); n != 0 {
		t.Errorf("upstreams saw %d requests through deny-all", n)
	}
}

// TestAllowlist: a listed domain is reachable (raw tunnel: the client
// verifies the upstream's own certificate), another domain and IP literals
// are not.
func TestAllowlist(t *testing.T) {
	ca := newUpstreamCA(t)
	api := newUpstream(t, ca, true, "api.example.com")
	other := newUpstream(t, ca, true, "other.example.com")
	h := start(t, egress.Options{Hosts: map[string]string{"api.example.com": api.addr(), "other.example.com": other.addr()}},
		newSession(t, `{"allow":["api.example.com"]}`), ca)
	c := h.client(t)

	if code, body := do(t, c, "GET", "https://api.example.com/ok", nil, ""); code != 200 || body != "upstream api.example.com /ok" {
		t.Fatalf("allowed domain: %d %q", code, body)
	}
	if code, _ := do(t, c, "GET", "https://other.example.com/", nil, ""); code != 0 {
		t.Errorf("other domain: status %d, want the CONNECT refused", code)
	}
	if code, body := do(t, c, "GET", "http://203.0.113.7/", nil, ""); code != 403 || !strings.Contains(body, "blocks 203.0.113.7") {
		t.Errorf("IP literal: %d %q", code, body)
	}
	ccode, _, stderr, exit := h.curl(t, "https://203.0.113.7/")
	if exit == 0 || !strings.Contains(stderr, "403") {
		t.Errorf("curl to an IP literal: exit %d code %s stderr %q", exit, ccode, stderr)
	}
	if len(other.requests()) != 0 {
		t.Errorf("other.example.com was reached")
	}
	if got := api.requests(); len(got) != 1 || got[0].Host != "api.example.com" {
		t.Errorf("api.example.com saw %+v", got)
	}
}

// TestWildcard: "*." as the first label matches any depth of subdomain but
// not the apex; "*" elsewhere matches one label.
func TestWildcard(t *testing.T) {
	up := newUpstream(t, nil, false, "any")
	names := []string{"a.example.com", "a.b.example.com", "example.com", "www.foo.org", "www.a.b.org", "foo.org"}
	hosts := map[string]string{}
	for _, n := range names {
		hosts[n] = up.addr()
	}
	h := start(t, egress.Options{Hosts: hosts}, newSession(t, `{"allow":["*.example.com","www.*.org"]}`), nil)
	c := h.client(t)
	want := map[string]int{"a.example.com": 200, "a.b.example.com": 200, "example.com": 403,
		"www.foo.org": 200, "www.a.b.org": 403, "foo.org": 403}
	for _, n := range names {
		if code, _ := do(t, c, "GET", "http://"+n+"/", nil, ""); code != want[n] {
			t.Errorf("%s: status %d, want %d", n, code, want[n])
		}
	}

	// A bare "*" allows every name (but not IP literals, which only
	// subnets govern).
	h.sess.set(t, `{"allow":["*"]}`)
	if code, _ := do(t, c, "GET", "http://foo.org/", nil, ""); code != 200 {
		t.Errorf(`"*": foo.org status %d`, code)
	}
	if code, _ := do(t, c, "GET", "http://203.0.113.9/", nil, ""); code != 403 {
		t.Errorf(`"*": IP literal status %d, want 403`, code)
	}
}

// TestSubnets: subnets.allow admits addresses no domain names; subnets.deny
// refuses an address even when its domain is allowed.
func TestSubnets(t *testing.T) {
	up := newUpstream(t, nil, false, "api.example.com")
	_, port, _ := net.SplitHostPort(up.addr())
	h := start(t, egress.Options{Hosts: map[string]string{"api.example.com": up.addr(), "unlisted.example.com": up.addr()},
		AllowPrivateDestinations: true}, newSession(t, `{"allow":["api.example.com"],"subnets":{"deny":["127.0.0.0/8"]}}`), nil)
	c := h.client(t)

	code, body := do(t, c, "GET", "http://api.example.com/", nil, "")
	if code != 403 || !strings.Contains(body, "network policy blocks api.example.com") {
		t.Errorf("allowed domain in a denied subnet: %d %q, want 403", code, body)
	}
	ccode, _, stderr, exit := h.curl(t, "http://api.example.com/")
	if exit != 0 || ccode != "403" {
		t.Errorf("curl: allowed domain in a denied subnet: exit %d code %s %s", exit, ccode, stderr)
	}
	if n := len(up.requests()); n != 0 {
		t.Fatalf("upstream reached %d times through a denied subnet", n)
	}

	h.sess.set(t, `{"allow":["api.example.com"],"subnets":{"allow":["127.0.0.1/32"],"deny":["127.0.0.2/32"]}}`)
	for u, want := range map[string]int{
		"http://127.0.0.1:" + port + "/": 200, // IP literal in subnets.allow
		"http://unlisted.example.com/":   200, // a name resolving into subnets.allow
		"http://127.0.0.2:" + port + "/": 403, // denied subnet
		"http://127.0.0.3:" + port + "/": 403, // in no list
		"http://[::1]:" + port + "/":     403,
	} {
		if code, body := do(t, c, "GET", u, nil, ""); code != want {
			t.Errorf("%s: %d %q, want %d", u, code, body, want)
		}
	}
}

// TestPrivateDestinationsRefused: with AllowPrivateDestinations off, a
// loopback destination the Hosts map does not name is refused even under
// allow-all, by IP literal or by a name resolving to it.
func TestPrivateDestinationsRefused(t *testing.T) {
	ca := newUpstreamCA(t)
	up := newUpstream(t, ca, true, "api.example.com")
	_, port, _ := net.SplitHostPort(up.addr())
	h := start(t, egress.Options{Hosts: map[string]string{"api.example.com": up.addr()}}, newSession(t, `{"mode":"allow-all"}`), ca)
	c := h.client(t)

	for _, u := range []string{"http://127.0.0.1:" + port + "/", "http://localhost:" + port + "/", "http://[::1]:" + port + "/",
		"http://10.1.2.3/", "http://169.254.169.254/latest/meta-data/"} {
		code, body := do(t, c, "GET", u, nil, "")
		if code != 403 || !strings.Contains(body, "loopback, private or link-local") {
			t.Errorf("%s: %d %q, want the proxy's 403", u, code, body)
		}
	}
	if code, _ := do(t, c, "GET", "https://127.0.0.1:"+port+"/", nil, ""); code != 0 {
		t.Errorf("CONNECT to loopback: status %d, want refused", code)
	}
	ccode, _, stderr, exit := h.curl(t, "https://127.0.0.1:"+port+"/")
	if exit == 0 || !strings.Contains(stderr, "403") {
		t.Errorf("curl CONNECT to loopback: exit %d code %s %q", exit, ccode, stderr)
	}
	if n := len(up.requests()); n != 0 {
		t.Errorf("loopback upstream reached %d times", n)
	}
	if code, _ := do(t, c, "GET", "https://api.example.com/", nil, ""); code != 200 {
		t.Errorf("a mapped name: status %d, want 200", code)
	}
}
