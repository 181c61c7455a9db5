package main

import (
	"bufio"
	"context"
	"crypto"
	"crypto/hmac"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/tls"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/getsentry/sandbox-controller/localstack/emulator/egress"
)

// world is the emulator's egress proxy, the broker, api.github.test and an
// issuer serving the proxy's JWKS, all on loopback.
type world struct {
	ca          *testCA
	github      *recorder
	capture     *recorder // another forwardURL's endpoint, which receives tokens minted for it
	proxy       *egress.Proxy
	issuer      string
	jwksFetches atomic.Int32
	direct      *http.Client // reaches https://broker.test without the proxy
	brokerLogs  *logs
	proxyLogs   *logs
	clock       *clock
	k8s         client.Client
	secret      string // in the forward URL's path, as Junior's signed token is
	forwardURL  string
	creds       staticCredentials
}

func newWorld(t *testing.T) *world {
	t.Helper()
	w := &world{ca: newTestCA(t), brokerLogs: &logs{}, proxyLogs: &logs{}, clock: &clock{}}
	w.secret = "fwdsecret" + randomHex(t)
	w.forwardURL = "https://" + brokerHost + "/egress/" + w.secret
	w.creds = staticCredentials{
		"conv-7": {githubHost: {"Authorization": "Bearer ghs_conv7" + randomHex(t)}},
		"conv-8": {githubHost: {"Authorization": "Bearer ghs_conv8" + randomHex(t)}},
	}
	w.github = newRecorder(t, w.ca, githubHost)
	w.capture = newRecorder(t, w.ca, "capture.test")
	jwks := w.ca.tlsServer(t, http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/.well-known/jwks" {
			http.NotFound(rw, r)
			return
		}
		w.jwksFetches.Add(1)
		rw.Header().Set("Content-Type", "application/json")
		_, _ = rw.Write(w.proxy.JWKS())
	}), "issuer.test")
	w.issuer = jwks.URL

	bl, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	w.proxy, err = egress.New(egress.Options{Issuer: w.issuer, UpstreamRoots: w.ca.pool, Logf: w.proxyLogs.logf,
		Hosts: map[string]string{brokerHost: bl.Addr().String(), "capture.test": w.capture.addr(), githubHost: w.github.addr()}})
	must(t, err)

	ctx, cancel := context.WithCancel(context.Background())
	idx, err := newSandboxIndex(ctx, apiServer, namespace)
	must(t, err)
	w.k8s, err = client.New(apiServer, client.Options{Scheme: testScheme()})
	must(t, err)
	b, err := newBroker(options{PublicOrigin: "https://" + brokerHost, Issuers: []string{w.issuer}, TeamID: teamID, ProjectID: projectID,
		Sandboxes: idx, Credentials: w.creds, Logf: w.brokerLogs.logf, Now: w.clock.now,
		Upstream:   &http.Transport{DialContext: dialTo(map[string]string{githubHost + ":443": w.github.addr()}), TLSClientConfig: &tls.Config{RootCAs: w.ca.pool}},
		JWKSClient: &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: w.ca.pool}}}})
	must(t, err)
	certFile, keyFile := w.ca.leafFiles(t, brokerHost)
	done := make(chan error, 1)
	go func() { done <- serve(ctx, bl, b, certFile, keyFile) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	dtr := &http.Transport{DialContext: dialTo(map[string]string{brokerHost + ":443": bl.Addr().String()}), TLSClientConfig: &tls.Config{RootCAs: w.ca.pool}}
	t.Cleanup(dtr.CloseIdleConnections)
	w.direct = &http.Client{Transport: dtr, Timeout: 20 * time.Second}
	return w
}

// policy is the Sandbox's network policy as the firewall gets it: the
// GitHub API through the broker, and capture.test through its own
// forwardURL (a stand-in for some other broker).
func (w *world) policy() string {
	return `{"allow":{"` + githubHost + `":[{"forwardURL":"` + w.forwardURL + `"}],` +
		`"capture.test":[{"forwardURL":"https://capture.test/collect"}]}}`
}

// sandbox serves a session for a Vercel sandbox and returns its client.
func (w *world) sandbox(t *testing.T, team, vercelName string) *http.Client {
	return serveSession(t, w.proxy, w.ca, w.policy(), egress.Identity{TeamID: team, ProjectID: projectID,
		SandboxID: "sbx_" + randomHex(t), SandboxName: vercelName})
}

// secrets are the values no log may contain: credentials, the forward
// URL's secret, and any JWT (its header always encodes to "eyJ").
func (w *world) checkLogs(t *testing.T) {
	t.Helper()
	for _, l := range []*logs{w.brokerLogs, w.proxyLogs} {
		all := l.all()
		for _, secret := range []string{w.secret, w.creds["conv-7"][githubHost]["Authorization"], w.creds["conv-8"][githubHost]["Authorization"], "eyJ"} {
			if strings.Contains(all, secret) {
				t.Errorf("a log carries a secret (%.12s…):\n%s", secret, all)
			}
		}
	}
}

// checkUpstream: the request reached upstream with its conversation's
// credential and without the token, the forwarding headers or the forward
// URL's secret.
func (w *world) checkUpstream(t *testing.T, r seen, conv string) {
	t.Helper()
	if got, want := r.Header.Get("Authorization"), w.creds[conv][githubHost]["Authorization"]; got != want {
		t.Errorf("%s's request reached upstream with Authorization %.14q…, want its conversation's credential", conv, got)
	}
	for k, vs := range r.Header {
		v := strings.Join(vs, " ")
		if strings.HasPrefix(strings.ToLower(k), "vercel-") || strings.Contains(v, "eyJ") || strings.Contains(v, w.secret) {
			t.Errorf("upstream received %s: the forwarding headers and the token must stay at the broker", k)
		}
	}
}

func request(t *testing.T, method, url, body string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	must(t, err)
	return req
}

// TestForwardedRequestsGetTheirConversationsCredential: a request a sandbox
// sends to api.github.test goes through the firewall to the broker, which
// sends it on with the credential of the conversation the Sandbox's label
// names; upstream sees neither the token nor the forwarding headers, and a
// credential the sandbox sets itself is replaced.
func TestForwardedRequestsGetTheirConversationsCredential(t *testing.T) {
	w := newWorld(t)
	createSandbox(t, w.k8s, "conversation-7", "junior-conversation-7-1a2b3c4d", map[string]string{LabelConversation: "conv-7"})
	createSandbox(t, w.k8s, "conversation-8", "junior-conversation-8-5e6f7a8b", map[string]string{LabelConversation: "conv-8"})
	sb7 := w.sandbox(t, teamID, "junior-conversation-7-1a2b3c4d")
	sb8 := w.sandbox(t, teamID, "junior-conversation-8-5e6f7a8b")

	req := request(t, "POST", "https://"+githubHost+"/repos/getsentry/junior/issues?state=open", `{"title":"hi"}`)
	req.Header.Set("Authorization", "Bearer sandbox-made-this-up")
	if code, body := do(t, sb7, req); code != 200 || body != githubHost+" answered POST /repos/getsentry/junior/issues" {
		t.Fatalf("conversation 7's request: %d %q", code, body)
	}
	if code, body := do(t, sb8, request(t, "GET", "https://"+githubHost+"/user", "")); code != 200 {
		t.Fatalf("conversation 8's request: %d %q", code, body)
	}
	reqs := w.github.requests()
	if len(reqs) != 2 {
		t.Fatalf("api.github.test saw %d requests, want 2", len(reqs))
	}
	r7, r8 := reqs[0], reqs[1]
	if r7.Method != "POST" || r7.Host != githubHost || r7.Query != "state=open" || r7.Body != `{"title":"hi"}` {
		t.Errorf("upstream request: %+v", r7)
	}
	w.checkUpstream(t, r7, "conv-7")
	w.checkUpstream(t, r8, "conv-8")
	if n := w.jwksFetches.Load(); n != 1 {
		t.Errorf("the JWKS was fetched %d times for two requests, want once (cached)", n)
	}
	w.checkLogs(t)
	if !strings.Contains(w.brokerLogs.all(), `object=junior/conversation-7 conversation="conv-7"`) {
		t.Errorf("the broker's log does not say which Sandbox and conversation a request was for:\n%s", w.brokerLogs.all())
	}
}

// TestAnswersStream: the broker passes the upstream's answer on as it
// comes (server-sent events, long downloads), not once it is complete.
func TestAnswersStream(t *testing.T) {
	w := newWorld(t)
	createSandbox(t, w.k8s, "conversation-7", "junior-conversation-7-1a2b3c4d", map[string]string{LabelConversation: "conv-7"})
	sb := w.sandbox(t, teamID, "junior-conversation-7-1a2b3c4d")
	resp, err := sb.Do(request(t, "GET", "https://"+githubHost+"/stream", ""))
	must(t, err)
	defer resp.Body.Close()
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	if err != nil || line != "first\n" {
		t.Fatalf("first line: %q %v", line, err)
	}
	w.github.release <- struct{}{}
}

// TestRefusesWhatItCannotVerify: forged, unsigned, expired and replayed
// tokens are answered 403 "Forbidden" with no detail, and nothing reaches
// upstream.
func TestRefusesWhatItCannotVerify(t *testing.T) {
	w := newWorld(t)
	name := "junior-conversation-7-1a2b3c4d"
	createSandbox(t, w.k8s, "conversation-7", name, map[string]string{LabelConversation: "conv-7"})
	sb := w.sandbox(t, teamID, name)
	aud := w.forwardURL
	claims := map[string]any{"iss": w.issuer, "aud": aud, "team_id": teamID, "project_id": projectID,
		"sandbox_id": "sbx_1", "sandbox_name": name, "iat": time.Now().Unix(), "exp": time.Now().Add(5 * time.Minute).Unix()}
	var set struct{ Keys []struct{ Kid string } }
	must(t, json.Unmarshal(w.proxy.JWKS(), &set))
	kid := set.Keys[0].Kid

	// A genuine token minted for another forward URL (capture.test's),
	// replayed here, naming that URL's host in Host as well.
	if code, _ := do(t, sb, request(t, "GET", "https://capture.test/x", "")); code != 200 {
		t.Fatalf("capture request: %d", code)
	}
	replayed := w.capture.requests()[0].Header.Get("Vercel-Sandbox-Oidc-Token")

	cases := map[string]struct {
		token  string
		host   string // Host header; brokerHost when empty
		path   string // request path; the forward URL's path + /repos/x when empty
		reason string // in the broker's log
	}{
		"forged (another key, same kid)": {token: signRS256(t, newRSAKey(t), kid, claims), reason: "signature does not verify"},
		"unsigned (alg none)":            {token: encodeJWT(map[string]any{"alg": "none", "typ": "JWT"}, claims) + ".", reason: `alg \"none\" is not RS256`},
		"HS256 keyed with a guess":       {token: signHS256(kid, claims), reason: `alg \"HS256\"`},
		"replayed for another aud":       {token: replayed, reason: "aud is not this forward URL"},
		"replayed with the other Host":   {token: replayed, host: "capture.test", path: "/collect/repos/x", reason: "aud is not this forward URL"},
		"no token":                       {token: "", reason: "missing forwarding headers"},
	}
	for what, c := range cases {
		t.Run(what, func(t *testing.T) {
			req := request(t, "GET", "https://"+brokerHost+"/egress/"+w.secret+"/repos/x", "")
			if c.path != "" {
				req.URL.Path = c.path
			}
			req.Host = c.host
			setForwarding(req, c.token)
			mark := w.brokerLogs.mark()
			if code, body := do(t, w.direct, req); code != 403 || body != "Forbidden\n" {
				t.Errorf("answer %d %q, want 403 Forbidden", code, body)
			}
			if l := w.brokerLogs.since(mark); !strings.Contains(l, c.reason) {
				t.Errorf("the broker's log lacks the reason %q:\n%s", c.reason, l)
			}
		})
	}

	// Within the sixty seconds of clock tolerance after exp, a genuine
	// token still passes (the clocks of Vercel and the broker may differ).
	w.clock.advance(5*time.Minute + 30*time.Second)
	if code, body := do(t, sb, request(t, "GET", "https://"+githubHost+"/user", "")); code != 200 {
		t.Errorf("token 30 s past exp: %d %q, want it accepted", code, body)
	}
	// Expired: a genuine token, at the broker six minutes later (five
	// minutes of validity plus sixty seconds of tolerance have passed).
	w.clock.advance(30 * time.Second)
	mark := w.brokerLogs.mark()
	if code, body := do(t, sb, request(t, "GET", "https://"+githubHost+"/user", "")); code != 403 || body != "Forbidden\n" {
		t.Errorf("expired token: %d %q", code, body)
	}
	if l := w.brokerLogs.since(mark); !strings.Contains(l, "token expired") {
		t.Errorf("the broker's log lacks the reason:\n%s", l)
	}
	if n := len(w.github.requests()); n != 1 {
		t.Errorf("api.github.test saw %d requests, want only the one within tolerance", n)
	}
	w.checkLogs(t)
}

// TestRefusesSandboxesItDoesNotKnow: a valid token is not enough; the
// sandbox must be a labelled Sandbox of the configured team and project,
// and its conversation must have a credential for the host.
func TestRefusesSandboxesItDoesNotKnow(t *testing.T) {
	w := newWorld(t)
	createSandbox(t, w.k8s, "unlabelled", "junior-unlabelled-0a0b0c0d", nil)
	createSandbox(t, w.k8s, "conversation-9", "junior-conversation-9-9a9b9c9d", map[string]string{LabelConversation: "conv-9"})
	createSandbox(t, w.k8s, "conversation-7", "junior-conversation-7-1a2b3c4d", map[string]string{LabelConversation: "conv-7"})
	for what, c := range map[string]struct{ team, name, reason string }{
		"no Sandbox object":               {teamID, "someone-elses-sandbox", errNoSandbox.Error()},
		"Sandbox without the label":       {teamID, "junior-unlabelled-0a0b0c0d", errNoSandbox.Error()},
		"conversation without credential": {teamID, "junior-conversation-9-9a9b9c9d", errNoCredential.Error()},
		"another Vercel team":             {"team_other", "junior-conversation-7-1a2b3c4d", "another Vercel team"},
	} {
		t.Run(what, func(t *testing.T) {
			sb := w.sandbox(t, c.team, c.name)
			mark := w.brokerLogs.mark()
			if code, body := do(t, sb, request(t, "GET", "https://"+githubHost+"/user", "")); code != 403 || body != "Forbidden\n" {
				t.Errorf("answer %d %q, want 403 Forbidden", code, body)
			}
			if l := w.brokerLogs.since(mark); !strings.Contains(l, c.reason) {
				t.Errorf("the broker's log lacks %q:\n%s", c.reason, l)
			}
		})
	}
	if n := len(w.github.requests()); n != 0 {
		t.Errorf("api.github.test saw %d requests from refused ones", n)
	}
	w.checkLogs(t)
}

// TestFindFallsBackToTheAPIServer: a Sandbox the cache has not seen yet
// (created a moment ago) is found by listing from the API server.
func TestFindFallsBackToTheAPIServer(t *testing.T) {
	ctx, stop := context.WithCancel(context.Background())
	idx, err := newSandboxIndex(ctx, apiServer, namespace)
	must(t, err)
	stop() // the cache keeps what it has and sees nothing new
	c, err := client.New(apiServer, client.Options{Scheme: testScheme()})
	must(t, err)
	createSandbox(t, c, "conversation-late", "junior-conversation-late-1234abcd", map[string]string{LabelConversation: "conv-late"})
	sbx, conv, err := idx.find(context.Background(), "junior-conversation-late-1234abcd")
	if err != nil || sbx.Name != "conversation-late" || conv != "conv-late" {
		t.Fatalf("find: %v, %v, %q", sbx, err, conv)
	}
	if _, _, err := idx.find(context.Background(), "junior-nobody"); !errors.Is(err, errNoSandbox) {
		t.Errorf("find of an unknown name: %v", err)
	}
}

func setForwarding(req *http.Request, token string) {
	req.Header.Set(hdrForwardedHost, githubHost)
	req.Header.Set(hdrForwardedScheme, "https")
	req.Header.Set(hdrForwardedPort, "443")
	req.Header.Set(hdrForwardedPath, "/repos/x")
	if token != "" {
		req.Header.Set(hdrOIDCToken, token)
	}
}

func newRSAKey(t *testing.T) *rsa.PrivateKey {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	must(t, err)
	return k
}

func encodeJWT(header, claims map[string]any) string {
	enc := func(v any) string {
		b, _ := json.Marshal(v)
		return base64.RawURLEncoding.EncodeToString(b)
	}
	return enc(header) + "." + enc(claims)
}

func signRS256(t *testing.T, key *rsa.PrivateKey, kid string, claims map[string]any) string {
	signing := encodeJWT(map[string]any{"alg": "RS256", "typ": "JWT", "kid": kid}, claims)
	d := sha256.Sum256([]byte(signing))
	sig, err := rsa.SignPKCS1v15(rand.Reader, key, crypto.SHA256, d[:])
	must(t, err)
	return signing + "." + base64.RawURLEncoding.EncodeToString(sig)
}

func signHS256(kid string, claims map[string]any) string {
	signing := encodeJWT(map[string]any{"alg": "HS256", "typ": "JWT", "kid": kid}, claims)
	m := hmac.New(sha256.New, []byte(kid))
	m.Write([]byte(signing))
	return signing + "." + base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

func randomHex(t *testing.T) string {
	b := make([]byte, 8)
	_, err := rand.Read(b)
	must(t, err)
	return hex.EncodeToString(b)
}

// TestConfigurationErrorsNameTheFlag: what newBroker refuses, with the flag
// named; an http issuer only on loopback (the emulator in make dev).
func TestConfigurationErrorsNameTheFlag(t *testing.T) {
	good := options{PublicOrigin: "https://broker.example.com", Issuers: []string{vercelIssuer}, TeamID: teamID, ProjectID: projectID}
	if _, err := newBroker(good); err != nil {
		t.Fatalf("a good configuration: %v", err)
	}
	for _, c := range []struct {
		edit func(o *options)
		flag string
	}{
		{func(o *options) { o.PublicOrigin = "http://broker.example.com" }, "--public-origin"},
		{func(o *options) { o.PublicOrigin = "https://broker.example.com/egress" }, "--public-origin"},
		{func(o *options) { o.TeamID = "" }, "--team-id"},
		{func(o *options) { o.Issuers = []string{"http://oidc.example.com"} }, "--issuer"},
		{func(o *options) { o.Issuers = []string{"https://"} }, "--issuer"},
	} {
		o := good
		c.edit(&o)
		if _, err := newBroker(o); err == nil || !strings.Contains(err.Error(), c.flag) {
			t.Errorf("%+v: %v, want an error naming %s", o, err, c.flag)
		}
	}
	for _, iss := range []string{"http://127.0.0.1:4000", "http://localhost:4000", "http://[::1]:4000"} {
		o := good
		o.Issuers = []string{iss}
		if _, err := newBroker(o); err != nil {
			t.Errorf("loopback issuer %s: %v", iss, err)
		}
	}
}
