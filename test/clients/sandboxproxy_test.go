package clients

import (
	"bufio"
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/getsentry/sandbox-controller/localstack/emulator/egress"
)

// The names in TestOfficialSandboxProxy: a sandbox calls api.github.test,
// whose requests its policy forwards to a broker at sandboxBrokerHost built
// with the official SDK's defineSandboxProxy, a loopback server the egress
// proxy maps the name to.
const (
	sandboxBrokerHost = "sandbox-broker.test"
	vercelOIDCIssuer  = "https://oidc.vercel.com"
)

// sdkProxyAnswer is what testdata/sandbox-proxy.mjs's handler answers: the
// identity and the sanitized request defineSandboxProxy gave it.
type sdkProxyAnswer struct {
	Meta struct {
		Host, TeamID, ProjectID, SandboxID, SandboxName string
	}
	URL, Method, Body string
	Headers           map[string]string
}

// TestOfficialSandboxProxy runs @vercel/sandbox 3.5's defineSandboxProxy
// (dist/proxy.js, unchanged) behind a Node HTTPS server as the forwardURL
// target of the emulator's egress proxy, configured with Vercel's issuer.
// The handler accepts the request the proxy forwarded (its token verifies:
// RS256, issuer, aud, exp, claims), reports the sandbox's team, project, id
// and name, and gets the original request without the forwarding headers;
// it refuses a token signed by another key. The only difference from
// production: the Node script answers https://oidc.vercel.com/.well-known/jwks
// with the proxy's JWKS through a fetch shim (testdata/sandbox-proxy.mjs).
func TestOfficialSandboxProxy(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the official SDK in Node.js")
	}
	modules := installOfficialClients(t)
	ca := newLoopbackCA(t)
	certFile, keyFile := ca.leafFiles(t, sandboxBrokerHost)
	jwksFile := filepath.Join(t.TempDir(), "jwks.json")
	broker := startSandboxProxyScript(t, modules, certFile, keyFile, jwksFile)
	p, err := egress.New(egress.Options{Issuer: vercelOIDCIssuer, UpstreamRoots: ca.pool,
		// api.github.test is never dialled (its requests go to the broker),
		// but the proxy resolves a CONNECT's host before reading requests.
		Hosts: map[string]string{sandboxBrokerHost: broker.addr, sandboxBrokerHost + ":8443": broker.addr, "api.github.test": "127.0.0.1:9"}})
	must(t, err)
	must(t, os.WriteFile(jwksFile, p.JWKS(), 0o600))

	id := egress.Identity{TeamID: "team_sdk", ProjectID: "prj_sdk", SandboxID: "sbx_sdk42", SandboxName: "default-conversation-7-1a2b3c4d"}
	secret := "fwdsecret" + hex.EncodeToString(randomBytes(t, 8))
	forwardURL := "https://" + sandboxBrokerHost + "/proxy/" + secret
	// Both forms of a forward URL the audience depends on: default port,
	// and an explicit port with a trailing slash (aud keeps the port and
	// drops the slash, as the SDK's getForwardUrlAudience does).
	for _, c := range []struct{ forwardURL, metaHost string }{
		{forwardURL, sandboxBrokerHost},
		{"https://" + sandboxBrokerHost + ":8443/proxy/" + secret + "/", sandboxBrokerHost + ":8443"},
	} {
		sandbox := serveEgressSession(t, p, `{"allow":{"api.github.test":[{"forwardURL":"`+c.forwardURL+`"}]}}`, id)
		checkSDKAccepts(t, sandbox, broker, id, c.metaHost)
	}

	// A token signed by another key, otherwise exactly what the proxy
	// sends (issuer, kid, aud, claims), sent straight to the broker.
	var set struct{ Keys []struct{ Kid string } }
	must(t, json.Unmarshal(p.JWKS(), &set))
	forged := forgeRS256(t, set.Keys[0].Kid, map[string]any{
		"iss": vercelOIDCIssuer, "aud": forwardURL, "team_id": id.TeamID, "project_id": id.ProjectID,
		"sandbox_id": id.SandboxID, "sandbox_name": id.SandboxName, "exp": time.Now().Add(5 * time.Minute).Unix(),
	})
	direct, err := http.NewRequest("GET", forwardURL+"/user", nil)
	must(t, err)
	for k, v := range map[string]string{"Vercel-Forwarded-Host": "api.github.test", "Vercel-Forwarded-Scheme": "https",
		"Vercel-Forwarded-Port": "443", "Vercel-Forwarded-Path": "/user", "Vercel-Sandbox-Oidc-Token": forged} {
		direct.Header.Set(k, v)
	}
	if code, body := send(t, broker.client(ca), direct); code != 403 {
		t.Errorf("a forged token: %d %q, want 403", code, body)
	}
	if reason := broker.waitRefusal(); reason != "refused: signature verification failed" {
		t.Errorf("the handler refused the forged token for another reason than its signature: %q", reason)
	}
	if strings.Contains(broker.stderr(), secret) {
		t.Errorf("the script's output carries the forward URL")
	}
}

// checkSDKAccepts sends a request from the sandbox and checks what
// defineSandboxProxy gave its handler.
func checkSDKAccepts(t *testing.T, sandbox *http.Client, broker *sdkBroker, id egress.Identity, metaHost string) {
	t.Helper()
	req, err := http.NewRequest("POST", "https://api.github.test/repos/getsentry/junior/issues?state=open", strings.NewReader(`{"title":"hi"}`))
	must(t, err)
	req.Header.Set("X-Custom", "kept")
	code, body := send(t, sandbox, req)
	if code != 200 {
		t.Fatalf("defineSandboxProxy answered %d %q for the request the egress proxy forwarded; its reason: %s", code, body, broker.stderr())
	}
	var got sdkProxyAnswer
	must(t, json.Unmarshal([]byte(body), &got))
	if got.Meta.Host != metaHost || got.Meta.TeamID != id.TeamID || got.Meta.ProjectID != id.ProjectID ||
		got.Meta.SandboxID != id.SandboxID || got.Meta.SandboxName != id.SandboxName {
		t.Errorf("meta %+v, want host %s and the session's identity %+v", got.Meta, metaHost, id)
	}
	if got.URL != "https://api.github.test/repos/getsentry/junior/issues?state=open" || got.Method != "POST" || got.Body != `{"title":"hi"}` ||
		got.Headers["host"] != "api.github.test" || got.Headers["x-custom"] != "kept" {
		t.Errorf("the handler's request: %+v", got)
	}
	for k := range got.Headers {
		if strings.HasPrefix(k, "vercel-") {
			t.Errorf("the handler's request still carries %s", k)
		}
	}
}

// sdkBroker is testdata/sandbox-proxy.mjs running.
type sdkBroker struct {
	addr string
	mu   sync.Mutex
	errs bytes.Buffer
}

func (b *sdkBroker) stderr() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.errs.String()
}

func (b *sdkBroker) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.errs.Write(p)
}

// waitRefusal returns the first refusal line the script printed (its
// stderr arrives through a pipe, after the answer).
func (b *sdkBroker) waitRefusal() string {
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		for _, line := range strings.Split(b.stderr(), "\n") {
			if strings.HasPrefix(line, "refused: ") {
				return line
			}
		}
	}
	return "(no refusal printed) " + b.stderr()
}

// client reaches the broker under its name, without the egress proxy.
func (b *sdkBroker) client(ca *loopbackCA) *http.Client {
	var d net.Dialer
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.pool},
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return d.DialContext(ctx, network, b.addr)
		}}
	return &http.Client{Transport: tr, Timeout: 20 * time.Second}
}

func startSandboxProxyScript(t *testing.T, modules, certFile, keyFile, jwksFile string) *sdkBroker {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, "node", filepath.Join(repoRoot, "test", "clients", "testdata", "sandbox-proxy.mjs"))
	cmd.Env = append(os.Environ(), "OFFICIAL_NODE_MODULES="+modules, "TLS_CERT="+certFile, "TLS_KEY="+keyFile, "JWKS_FILE="+jwksFile)
	b := &sdkBroker{}
	cmd.Stderr = b
	out, err := cmd.StdoutPipe()
	must(t, err)
	must(t, cmd.Start())
	t.Cleanup(func() {
		cancel()
		_ = cmd.Wait()
	})
	lines := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(out).ReadString('\n')
		lines <- line
		_, _ = io.Copy(io.Discard, out)
	}()
	select {
	case line := <-lines:
		var port int
		if _, err := fmt.Sscanf(line, "listening %d", &port); err != nil {
			t.Fatalf("sandbox-proxy.mjs did not start: %q %s", line, b.stderr())
		}
		b.addr = fmt.Sprintf("127.0.0.1:%d", port)
	case <-time.After(30 * time.Second):
		t.Fatalf("sandbox-proxy.mjs did not start within 30 s: %s", b.stderr())
	}
	return b
}

// egressSession is one sandbox as the egress proxy sees it.
type egressSession struct {
	pol *egress.Policy
	id  egress.Identity
}

func (s *egressSession) Policy() *egress.Policy    { return s.pol }
func (s *egressSession) Identity() egress.Identity { return s.id }

// serveEgressSession serves the proxy for one sandbox and returns the
// client a program in it uses: the proxy, and the proxy's CA trusted.
func serveEgressSession(t *testing.T, p *egress.Proxy, policy string, id egress.Identity) *http.Client {
	t.Helper()
	pol, err := egress.Compile(json.RawMessage(policy))
	must(t, err)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	done := make(chan error, 1)
	go func() { done <- p.Serve(l, &egressSession{pol: pol, id: id}) }()
	t.Cleanup(func() {
		_ = l.Close()
		if err := <-done; err != nil {
			t.Errorf("egress proxy: %v", err)
		}
	})
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(p.CACertPEM())
	tr := &http.Transport{Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: l.Addr().String()}), TLSClientConfig: &tls.Config{RootCAs: roots}}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 20 * time.Second}
}

func send(t *testing.T, c *http.Client, req *http.Request) (int, string) {
	t.Helper()
	resp, err := c.Do(req)
	must(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	must(t, err)
	return resp.StatusCode, string(b)
}

// loopbackCA plays the public CAs' part for the loopback broker.
type loopbackCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
}

func newLoopbackCA(t *testing.T) *loopbackCA {
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
	return &loopbackCA{cert: cert, key: key, pool: pool}
}

// leafFiles writes a certificate for name and its PKCS#8 key, as PEM files.
func (ca *loopbackCA) leafFiles(t *testing.T, name string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	must(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: name}, DNSNames: []string{name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	must(t, err)
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	must(t, err)
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	must(t, os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600))
	must(t, os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), 0o600))
	return certFile, keyFile
}

// forgeRS256 signs claims with a fresh key the verifier never saw.
func forgeRS256(t *testing.T, kid string, claims map[string]any) string {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	must(t, err)
	enc := func(v any) string {
		b, _ := json.Marshal(v)
		return base64.RawURLEncoding.EncodeToString(b)
	}
	signing := enc(map[string]string{"alg": "RS256", "typ": "JWT", "kid": kid}) + "." + enc(claims)
	d := sha256.Sum256([]byte(signing))
	sig, err := rsa.SignPKCS1v15(rand.Reader, key, crypto.SHA256, d[:])
	must(t, err)
	return signing + "." + base64.RawURLEncoding.EncodeToString(sig)
}

func randomBytes(t *testing.T, n int) []byte {
	b := make([]byte, n)
	_, err := rand.Read(b)
	must(t, err)
	return b
}
