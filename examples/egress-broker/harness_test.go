package main

import (
	"context"
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
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
	"github.com/getsentry/sandbox-controller/localstack/controlplane"
	"github.com/getsentry/sandbox-controller/localstack/emulator/egress"
)

// The test's world: a sandbox calls https://api.github.test through the
// emulator's egress proxy, whose policy forwards that domain to the broker
// at https://broker.test; the broker calls api.github.test itself. All of
// them are loopback servers under those names, with certificates from a
// test CA that plays the public CAs' part.
const (
	githubHost = "api.github.test"
	brokerHost = "broker.test"
	namespace  = "junior"
	teamID     = "team_junior"
	projectID  = "prj_junior"
)

// apiServer is the envtest API server with the CRDs, shared by the tests.
var apiServer *rest.Config

func TestMain(m *testing.M) {
	ctrllog.SetLogger(logr.Discard())
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		fmt.Fprintln(os.Stderr, "KUBEBUILDER_ASSETS is not set: run the tests with KUBEBUILDER_ASSETS=$(./hack/envtest.sh)")
		return 1
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		panic(err)
	}
	crds, err := controlplane.Render(root, filepath.Join("config", "crd"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	cp, err := controlplane.Start(context.Background(), controlplane.Options{CRDs: crds})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = cp.Stop() }()
	apiServer = cp.Config
	c, err := client.New(apiServer, client.Options{Scheme: testScheme()})
	if err == nil {
		err = c.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}})
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}

// testCA signs the loopback servers' certificates.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
}

func newTestCA(t *testing.T) *testCA {
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
	return &testCA{cert: cert, key: key, pool: pool}
}

// leafFiles writes a certificate for names (and 127.0.0.1) and its key.
func (ca *testCA) leafFiles(t *testing.T, names ...string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	must(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: names[0]},
		DNSNames: names, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	must(t, err)
	kder, err := x509.MarshalECPrivateKey(key)
	must(t, err)
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	must(t, os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600))
	must(t, os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600))
	return certFile, keyFile
}

func (ca *testCA) tlsServer(t *testing.T, h http.Handler, names ...string) *httptest.Server {
	t.Helper()
	certFile, keyFile := ca.leafFiles(t, names...)
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	must(t, err)
	s := httptest.NewUnstartedServer(h)
	s.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	s.StartTLS()
	t.Cleanup(s.Close)
	return s
}

// seen is one request a recording server received.
type seen struct {
	Method, Host, Path, Query, Body string
	Header                          http.Header
}

// recorder is a loopback HTTPS server that records what it receives.
type recorder struct {
	srv     *httptest.Server
	release chan struct{} // lets /stream finish
	mu      sync.Mutex
	reqs    []seen
}

func newRecorder(t *testing.T, ca *testCA, name string) *recorder {
	rec := &recorder{release: make(chan struct{}, 1)}
	rec.srv = ca.tlsServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if r.URL.Path == "/stream" {
			// The first line must reach the client before the answer
			// ends: the client releases the rest once it has read it.
			fmt.Fprintln(w, "first")
			w.(http.Flusher).Flush()
			select {
			case <-rec.release:
			case <-time.After(10 * time.Second):
			}
			fmt.Fprintln(w, "rest")
			return
		}
		rec.mu.Lock()
		rec.reqs = append(rec.reqs, seen{Method: r.Method, Host: r.Host, Path: r.URL.Path, Query: r.URL.RawQuery,
			Body: string(body), Header: r.Header.Clone()})
		rec.mu.Unlock()
		fmt.Fprintf(w, "%s answered %s %s", name, r.Method, r.URL.Path)
	}), name)
	return rec
}

func (rec *recorder) addr() string { return rec.srv.Listener.Addr().String() }

func (rec *recorder) requests() []seen {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return append([]seen(nil), rec.reqs...)
}

// session is one sandbox as the egress proxy sees it.
type session struct {
	pol *egress.Policy
	id  egress.Identity
}

func (s *session) Policy() *egress.Policy    { return s.pol }
func (s *session) Identity() egress.Identity { return s.id }

// logs captures a component's log lines.
type logs struct {
	mu    sync.Mutex
	lines []string
}

func (l *logs) logf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, fmt.Sprintf(format, args...))
}

// mark and since give the lines logged after a point.
func (l *logs) mark() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.lines)
}

func (l *logs) since(mark int) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines[mark:], "\n")
}

func (l *logs) all() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

// clock is the broker's clock, which a test can move forward.
type clock struct {
	mu     sync.Mutex
	offset time.Duration
}

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.offset)
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.offset += d
}

// serveSession serves the egress proxy for one sandbox and returns the
// HTTP client a program inside that sandbox would use.
func serveSession(t *testing.T, p *egress.Proxy, ca *testCA, pol string, id egress.Identity) *http.Client {
	t.Helper()
	compiled, err := egress.Compile(json.RawMessage(pol))
	must(t, err)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	done := make(chan error, 1)
	go func() { done <- p.Serve(l, &session{pol: compiled, id: id}) }()
	t.Cleanup(func() {
		_ = l.Close()
		if err := <-done; err != nil {
			t.Errorf("egress proxy: %v", err)
		}
	})
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(p.CACertPEM()) // the sandbox trusts the firewall's CA
	tr := &http.Transport{Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: l.Addr().String()}),
		TLSClientConfig: &tls.Config{RootCAs: roots}}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 20 * time.Second}
}

// dialTo is a DialContext that reaches names at loopback addresses.
func dialTo(hosts map[string]string) func(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if to, ok := hosts[addr]; ok {
			return d.DialContext(ctx, network, to)
		}
		return nil, fmt.Errorf("test: no route to %s", addr)
	}
}

// createSandbox creates a Sandbox with labels and records vercelName in its
// status, as the operator does after creating the Vercel sandbox.
func createSandbox(t *testing.T, c client.Client, name, vercelName string, lbls map[string]string) *sandboxv1.Sandbox {
	t.Helper()
	ctx := context.Background()
	rt := sandboxv1.Runtime("node24")
	sbx := &sandboxv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: lbls},
		Spec: sandboxv1.SandboxSpec{Source: sandboxv1.SandboxSource{Runtime: &rt}}}
	must(t, c.Create(ctx, sbx))
	sbx.Status.VercelName = vercelName
	must(t, c.Status().Update(ctx, sbx))
	t.Cleanup(func() { _ = c.Delete(context.Background(), sbx) })
	return sbx
}

func do(t *testing.T, c *http.Client, req *http.Request) (int, string) {
	t.Helper()
	resp, err := c.Do(req)
	must(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	must(t, err)
	return resp.StatusCode, string(b)
}

// testScheme knows Namespaces and Sandboxes.
func testScheme() *runtime.Scheme {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		panic(err)
	}
	if err := sandboxv1.AddToScheme(s); err != nil {
		panic(err)
	}
	return s
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
