package egress_test

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/getsentry/sandbox-controller/localstack/emulator/egress"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// session is a Session whose policy a test swaps.
type session struct {
	pol atomic.Pointer[egress.Policy]
	id  egress.Identity
}

func (s *session) Policy() *egress.Policy    { return s.pol.Load() }
func (s *session) Identity() egress.Identity { return s.id }

func (s *session) set(t *testing.T, raw string) {
	t.Helper()
	p, err := egress.Compile(json.RawMessage(raw))
	if err != nil {
		t.Fatalf("Compile(%s): %v", raw, err)
	}
	s.pol.Store(p)
}

func newSession(t *testing.T, raw string) *session {
	s := &session{id: egress.Identity{TeamID: "team_abc", ProjectID: "prj_123", SandboxID: "sbx_42", SandboxName: "junior-conv-7"}}
	s.set(t, raw)
	return s
}

// upstreamCA signs the loopback upstreams' certificates, as a public CA
// would sign api.github.com's.
type upstreamCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
	pem  []byte
}

func newUpstreamCA(t *testing.T) *upstreamCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	must(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test public CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true,
		BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	must(t, err)
	cert, err := x509.ParseCertificate(der)
	must(t, err)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &upstreamCA{cert: cert, key: key, pool: pool, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

func (ca *upstreamCA) leaf(t *testing.T, names ...string) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	must(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: names[0]},
		DNSNames: names, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	must(t, err)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// seen is one request an upstream received.
type seen struct {
	Method, Host, Path, Query string
	Header                    http.Header
	Body                      string
}

// upstream is a loopback server answering "upstream <name> <path>".
type upstream struct {
	srv  *httptest.Server
	mu   sync.Mutex
	reqs []seen
}

func (u *upstream) addr() string { return u.srv.Listener.Addr().String() }

func (u *upstream) requests() []seen {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]seen(nil), u.reqs...)
}

func newUpstream(t *testing.T, ca *upstreamCA, tlsOn bool, names ...string) *upstream {
	t.Helper()
	u := &upstream{}
	u.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		u.mu.Lock()
		u.reqs = append(u.reqs, seen{Method: r.Method, Host: r.Host, Path: r.URL.Path, Query: r.URL.RawQuery,
			Header: r.Header.Clone(), Body: string(body)})
		u.mu.Unlock()
		fmt.Fprintf(w, "upstream %s %s", names[0], r.URL.Path)
	}))
	if tlsOn {
		u.srv.TLS = &tls.Config{Certificates: []tls.Certificate{ca.leaf(t, names...)}}
		u.srv.StartTLS()
	} else {
		u.srv.Start()
	}
	t.Cleanup(u.srv.Close)
	return u
}

// logs captures Logf lines.
type logs struct {
	mu    sync.Mutex
	lines []string
}

func (l *logs) logf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, fmt.Sprintf(format, args...))
}

func (l *logs) all() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

// harness is one proxy serving one session on loopback.
type harness struct {
	p        *egress.Proxy
	sess     *session
	proxyURL *url.URL
	logs     *logs
	ca       *upstreamCA
	caFile   string // proxy CA + upstream CA, for curl
	egress   atomic.Int64
	ingress  atomic.Int64
	stop     func()
}

func start(t *testing.T, opts egress.Options, sess *session, ca *upstreamCA) *harness {
	t.Helper()
	h := &harness{sess: sess, logs: &logs{}, ca: ca}
	opts.Logf = h.logs.logf
	if ca != nil {
		opts.UpstreamRoots = ca.pool
	}
	opts.OnTransfer = func(_ egress.Session, e, i int64) {
		h.egress.Add(e)
		h.ingress.Add(i)
	}
	p, err := egress.New(opts)
	must(t, err)
	h.p = p
	l, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	h.proxyURL = &url.URL{Scheme: "http", Host: l.Addr().String()}
	done := make(chan error, 1)
	go func() { done <- p.Serve(l, sess) }()
	var once sync.Once
	h.stop = func() {
		once.Do(func() {
			_ = l.Close()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Serve returned %v", err)
				}
			case <-time.After(5 * time.Second):
				t.Errorf("Serve did not return after its listener closed")
			}
		})
	}
	t.Cleanup(h.stop)
	pemAll := append([]byte{}, p.CACertPEM()...)
	if ca != nil {
		pemAll = append(pemAll, ca.pem...)
	}
	h.caFile = filepath.Join(t.TempDir(), "ca.pem")
	must(t, os.WriteFile(h.caFile, pemAll, 0o600))
	return h
}

// client is what a program in the sandbox uses: the proxy from the
// environment and the proxy's CA (and the public roots) trusted.
func (h *harness) client(t *testing.T) *http.Client {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(h.p.CACertPEM())
	if h.ca != nil {
		pool.AddCert(h.ca.cert)
	}
	tr := &http.Transport{Proxy: http.ProxyURL(h.proxyURL), TLSClientConfig: &tls.Config{RootCAs: pool}}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

// do sends a request and returns status and body (status 0 on a transport
// error, with the error text as body).
func do(t *testing.T, c *http.Client, method, u string, hdr map[string]string, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, u, strings.NewReader(body))
	must(t, err)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// curl runs /usr/bin/curl through the proxy; it returns the HTTP code
// curl printed, the body, stderr and the exit code.
func (h *harness) curl(t *testing.T, args ...string) (code, body, stderr string, exit int) {
	t.Helper()
	out := filepath.Join(t.TempDir(), "body")
	full := append([]string{"-sS", "--max-time", "10", "-x", h.proxyURL.String(), "--cacert", h.caFile,
		"-o", out, "-w", "%{http_code}"}, args...)
	cmd := exec.Command("/usr/bin/curl", full...)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + t.TempDir()}
	var so, se bytes.Buffer
	cmd.Stdout, cmd.Stderr = &so, &se
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		exit = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("run curl: %v", err)
	}
	b, _ := os.ReadFile(out)
	return so.String(), string(b), se.String(), exit
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
