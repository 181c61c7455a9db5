package egress_test

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/getsentry/sandbox-controller/localstack/emulator/egress"
)

// closedWithin reports whether the proxy closes c within d.
func closedWithin(c net.Conn, d time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(d))
	_, err := io.Copy(io.Discard, c)
	return err == nil // EOF: the proxy closed; a deadline error: it did not
}

// TestSilentClientsAreDropped: a client that connects and never sends, one
// that stops after a CONNECT to a domain whose TLS the proxy terminates, and
// one idle in a raw tunnel do not hold a connection past their timeouts.
func TestSilentClientsAreDropped(t *testing.T) {
	up := newUpstream(t, nil, false, "api.example.com")
	h := start(t, egress.Options{
		Hosts:         map[string]string{"api.example.com": up.addr(), "raw.example.com": up.addr()},
		HeaderTimeout: 300 * time.Millisecond, TLSHandshakeTimeout: 300 * time.Millisecond,
		IdleTimeout: 500 * time.Millisecond,
	}, newSession(t, `{"allow":{"api.example.com":[{"transform":[{"headers":{"X":"1"}}]}],"raw.example.com":[]}}`), nil)

	silent, err := net.Dial("tcp", h.proxyURL.Host)
	must(t, err)
	defer silent.Close()
	if !closedWithin(silent, 3*time.Second) {
		t.Errorf("a client that sends nothing was not dropped")
	}

	for _, host := range []string{"api.example.com", "raw.example.com"} {
		c, err := net.Dial("tcp", h.proxyURL.Host)
		must(t, err)
		defer c.Close()
		fmt.Fprintf(c, "CONNECT %s:443 HTTP/1.1\r\nHost: %s:443\r\n\r\n", host, host)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("CONNECT %s: %v %v", host, resp, err)
		}
		if !closedWithin(c, 3*time.Second) {
			t.Errorf("a silent client after CONNECT %s was not dropped", host)
		}
	}
}

// TestHeaderSizeBounded: headers beyond MaxHeaderBytes are refused.
func TestHeaderSizeBounded(t *testing.T) {
	up := newUpstream(t, nil, false, "api.example.com")
	h := start(t, egress.Options{Hosts: map[string]string{"api.example.com": up.addr()}, MaxHeaderBytes: 4096},
		newSession(t, `{"mode":"allow-all"}`), nil)
	code, _ := do(t, h.client(t), "GET", "http://api.example.com/", map[string]string{"X-Big": strings.Repeat("a", 64<<10)}, "")
	if code != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("oversized headers: status %d, want 431", code)
	}
	if len(up.requests()) != 0 {
		t.Errorf("the upstream got the oversized request")
	}
}

// TestServeClosesAndCounts: closing the listener ends Serve with its open
// tunnels, and OnTransfer has counted every byte each way.
func TestServeClosesAndCounts(t *testing.T) {
	ca := newUpstreamCA(t)
	up := newUpstream(t, ca, true, "api.example.com")
	h := start(t, egress.Options{Hosts: map[string]string{"api.example.com": up.addr()}}, newSession(t, `{"allow":["api.example.com"]}`), ca)
	c := h.client(t)
	payload := strings.Repeat("p", 100_000)
	if code, _ := do(t, c, "POST", "https://api.example.com/upload", nil, payload); code != 200 {
		t.Fatalf("upload: %d", code)
	}
	h.stop() // the client's kept-alive tunnel is still open: Serve must close it
	if e, i := h.egress.Load(), h.ingress.Load(); e < int64(len(payload)) || i < int64(len("upstream api.example.com /upload")) {
		t.Errorf("counted egress %d ingress %d after a %d-byte upload", e, i, len(payload))
	}
}

// TestCompile covers the forms and the errors a policy author would see.
func TestCompile(t *testing.T) {
	for raw, mode := range map[string]string{
		``: "allow-all", `null`: "allow-all", `{"mode":"allow-all"}`: "allow-all", `{"mode":"deny-all"}`: "deny-all",
		`{}`: "custom", `{"mode":"custom","allowedDomains":["a.com"]}`: "custom", `{"allow":{"a.com":[]}}`: "custom",
	} {
		p, err := egress.Compile(json.RawMessage(raw))
		if err != nil || p.Mode() != mode {
			t.Errorf("Compile(%q) = %v, %v; want %s", raw, p.Mode(), err, mode)
		}
	}
	for raw, field := range map[string]string{
		`{"allow":{"a.com":[{"forwardURL":"http://broker/` + canary + `"}]}}`:                  "networkPolicy.allow.a.com[0].forwardURL",
		`{"allow":{"a.com":[{"match":{"path":{"regex":"("}},"response":{"statusCode":403}}]}}`: "networkPolicy.allow.a.com[0].match.path.regex",
		`{"subnets":{"deny":["10.0.0.0/33"]}}`:                                                 "networkPolicy.subnets.deny[0]",
		`{"mode":"sometimes"}`:                                                                 "networkPolicy.mode",
	} {
		_, err := egress.Compile(json.RawMessage(raw))
		if err == nil || !strings.Contains(err.Error(), field) || strings.Contains(err.Error(), canary) {
			t.Errorf("Compile(%s) error %v, want one naming %s without the URL", raw, err, field)
		}
	}
}

// TestNilPolicyFailsClosed: a Session without a policy allows nothing.
func TestNilPolicyFailsClosed(t *testing.T) {
	up := newUpstream(t, nil, false, "api.example.com")
	s := newSession(t, `{"mode":"allow-all"}`)
	s.pol.Store(nil)
	h := start(t, egress.Options{Hosts: map[string]string{"api.example.com": up.addr()}}, s, nil)
	if code, _ := do(t, h.client(t), "GET", "http://api.example.com/", nil, ""); code != 403 {
		t.Errorf("nil policy: status %d, want 403", code)
	}
}

// TestBusyTunnelOutlivesIdleTimeout: traffic keeps a raw tunnel open past
// IdleTimeout (the idle clock restarts with each read).
func TestBusyTunnelOutlivesIdleTimeout(t *testing.T) {
	ca := newUpstreamCA(t)
	up := newUpstream(t, ca, true, "raw.example.com")
	h := start(t, egress.Options{Hosts: map[string]string{"raw.example.com": up.addr()}, IdleTimeout: 400 * time.Millisecond},
		newSession(t, `{"allow":["raw.example.com"]}`), ca)
	c := h.client(t)
	for i := 0; i < 6; i++ {
		if code, body := do(t, c, "GET", "https://raw.example.com/tick", nil, ""); code != 200 {
			t.Fatalf("request %d: %d %q", i, code, body)
		}
		time.Sleep(150 * time.Millisecond)
	}
	if n := strings.Count(h.logs.all(), "tunnel to raw.example.com"); n != 1 {
		t.Errorf("%d tunnels for one kept-alive client over %v, want 1", n, 6*150*time.Millisecond)
	}
}

// TestTerminationTLS: the proxy's leaf names the CONNECT host, chains to
// CACertPEM, negotiates only HTTP/1.1, and refuses a ClientHello naming
// another server than the CONNECT did.
func TestTerminationTLS(t *testing.T) {
	up := newUpstream(t, nil, false, "api.example.com")
	h := start(t, egress.Options{Hosts: map[string]string{"api.example.com": up.addr()}},
		newSession(t, `{"allow":{"api.example.com":[{"transform":[{"headers":{"X":"1"}}]}]}}`), nil)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(h.p.CACertPEM())
	handshake := func(sni string) (*tls.Conn, error) {
		c, err := net.Dial("tcp", h.proxyURL.Host)
		must(t, err)
		t.Cleanup(func() { c.Close() })
		fmt.Fprintf(c, "CONNECT api.example.com:443 HTTP/1.1\r\nHost: api.example.com:443\r\n\r\n")
		br := bufio.NewReader(c)
		if resp, err := http.ReadResponse(br, nil); err != nil || resp.StatusCode != 200 {
			t.Fatalf("CONNECT: %v %v", resp, err)
		}
		tc := tls.Client(c, &tls.Config{ServerName: sni, RootCAs: pool, NextProtos: []string{"h2", "http/1.1"}})
		_ = tc.SetDeadline(time.Now().Add(5 * time.Second))
		return tc, tc.Handshake()
	}
	tc, err := handshake("api.example.com")
	if err != nil {
		t.Fatalf("handshake: %v", err)
	}
	if p := tc.ConnectionState().NegotiatedProtocol; p != "http/1.1" {
		t.Errorf("ALPN %q, want http/1.1", p)
	}
	// The proxy must refuse (a remote alert), not merely serve a leaf the
	// client then rejects for its name.
	if _, err := handshake("evil.example.org"); err == nil || !strings.Contains(err.Error(), "remote error") {
		t.Errorf("a ClientHello for another name than the CONNECT: %v, want the proxy to refuse it", err)
	}
}
