package oidcissuer_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"sigs.k8s.io/yaml"

	"github.com/getsentry/sandbox-controller/internal/vercel"
	"github.com/getsentry/sandbox-controller/localstack/emulator"
	"github.com/getsentry/sandbox-controller/localstack/oidcissuer"
)

// The issuer serves from a goroutine; Close must end it (and the HTTP
// clients here their idle connections).
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func start(t *testing.T, opts oidcissuer.Options) *oidcissuer.Issuer {
	t.Helper()
	iss, err := oidcissuer.Start(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := iss.Close(); err != nil {
			t.Error(err)
		}
	})
	return iss
}

// trusting is an HTTP client that trusts the issuer's CA and nothing else.
func trusting(t *testing.T, iss *oidcissuer.Issuer) *http.Client {
	t.Helper()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(iss.CAPEM()) {
		t.Fatal("CAPEM holds no certificate")
	}
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Timeout: 10 * time.Second, Transport: tr}
}

func payload(t *testing.T, tok string) map[string]any {
	t.Helper()
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		t.Fatalf("not a JWT: %d parts", len(parts))
	}
	raw, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		t.Fatal(err)
	}
	var c map[string]any
	if err := json.Unmarshal(raw, &c); err != nil {
		t.Fatal(err)
	}
	return c
}

// TestTokenIsShapedLikeVercels: the claims a Vercel function's token
// carries, with Vercel's default audience and lifetime.
func TestTokenIsShapedLikeVercels(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	iss := start(t, oidcissuer.Options{Now: func() time.Time { return now }})
	tok, err := iss.Mint(oidcissuer.Token{Team: "acme", Project: "junior", Environment: "production"})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"iss":         iss.URL() + "/acme",
		"aud":         "https://vercel.com/acme",
		"sub":         "owner:acme:project:junior:environment:production",
		"owner":       "acme",
		"owner_id":    "team_acme",
		"project":     "junior",
		"project_id":  "prj_junior",
		"environment": "production",
		"iat":         float64(now.Unix()),
		"nbf":         float64(now.Unix()),
		"exp":         float64(now.Add(time.Hour).Unix()),
	}
	got := payload(t, tok)
	for k, v := range want {
		if got[k] != v {
			t.Errorf("claim %s = %v, want %v", k, got[k], v)
		}
	}
	again, err := iss.Mint(oidcissuer.Token{Team: "acme", Project: "junior", Environment: "production"})
	if err != nil {
		t.Fatal(err)
	}
	if again == tok || payload(t, again)["jti"] == got["jti"] {
		t.Error("two tokens minted in the same second are the same: a refreshed token must differ")
	}
	if iss.Minted() != 2 {
		t.Errorf("Minted() = %d, want 2", iss.Minted())
	}
}

// TestEmulatorVerifiesMintedTokens: the emulator's verifier (the one JWT
// verifier of the local stack) accepts the issuer's tokens with its JWKS and
// refuses another issuer's, so signing and key set agree.
func TestEmulatorVerifiesMintedTokens(t *testing.T) {
	iss := start(t, oidcissuer.Options{})
	other := start(t, oidcissuer.Options{})
	emu, err := emulator.New(emulator.Options{DataDir: t.TempDir(), Exec: "none", OIDCJWKS: iss.JWKS(), OIDCIssuer: iss.IssuerURL("acme")})
	if err != nil {
		t.Fatal(err)
	}
	url, err := emu.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = emu.Close() })
	list := func(tok string) error {
		c, err := vercel.New(vercel.Config{BaseURL: url, OIDCToken: tok, MaxRetries: -1})
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.ListSandboxes(context.Background(), vercel.ListSandboxesOptions{})
		return err
	}
	fn := oidcissuer.Token{Team: "acme", Project: "junior", Environment: "production"}
	good, err := iss.Mint(fn)
	if err != nil {
		t.Fatal(err)
	}
	if err := list(good); err != nil {
		t.Fatalf("the emulator refuses the issuer's token: %v", err)
	}
	// Same team path, but signed by another key (and another host).
	forged, err := other.Mint(fn)
	if err != nil {
		t.Fatal(err)
	}
	if err := list(forged); !vercel.IsUnauthorized(err) {
		t.Fatalf("another issuer's token: %v, want refused", err)
	}
	expired, err := iss.Mint(oidcissuer.Token{Team: "acme", Project: "junior", Environment: "production", IssuedAt: time.Now().Add(-2 * time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if err := list(expired); !vercel.IsUnauthorized(err) {
		t.Fatalf("an expired token: %v, want refused", err)
	}
}

// TestDiscoveryOverHTTPS: each team's discovery document names its issuer
// exactly (the API server compares them) and a key set that holds the
// signing key, served over TLS verified with CAPEM.
func TestDiscoveryOverHTTPS(t *testing.T) {
	iss := start(t, oidcissuer.Options{})
	hc := trusting(t, iss)
	get := func(url string, into any) {
		t.Helper()
		resp, err := hc.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("GET %s: %d", url, resp.StatusCode)
		}
		if err := json.NewDecoder(resp.Body).Decode(into); err != nil {
			t.Fatal(err)
		}
	}
	var disc struct {
		Issuer  string `json:"issuer"`
		JWKSURI string `json:"jwks_uri"`
	}
	get(iss.IssuerURL("acme")+"/.well-known/openid-configuration", &disc)
	if disc.Issuer != iss.IssuerURL("acme") || !strings.HasPrefix(disc.Issuer, "https://127.0.0.1:") {
		t.Errorf("discovery issuer %q, want %q", disc.Issuer, iss.IssuerURL("acme"))
	}
	var jwks struct {
		Keys []struct{ Kty, Alg, Kid string } `json:"keys"`
	}
	get(disc.JWKSURI, &jwks)
	tok, err := iss.Mint(oidcissuer.Token{Team: "acme", Project: "junior", Environment: "preview"})
	if err != nil {
		t.Fatal(err)
	}
	var header struct{ Kid string }
	raw, _ := base64.RawURLEncoding.DecodeString(strings.Split(tok, ".")[0])
	_ = json.Unmarshal(raw, &header)
	if len(jwks.Keys) != 1 || jwks.Keys[0].Kid != header.Kid || jwks.Keys[0].Alg != "RS256" {
		t.Errorf("JWKS %+v does not hold the signing key %q", jwks.Keys, header.Kid)
	}
	// Without the CA the certificate is not trusted.
	if _, err := (&http.Client{Timeout: 5 * time.Second}).Get(disc.JWKSURI); err == nil {
		t.Error("the issuer's certificate verified without its CA")
	}
}

// TestMintEndpoint: minting needs the admin token; bad input is refused
// naming the field.
func TestMintEndpoint(t *testing.T) {
	iss := start(t, oidcissuer.Options{})
	hc := trusting(t, iss)
	accept := ""
	post := func(auth, body string) (int, string) {
		t.Helper()
		req, err := http.NewRequest("POST", iss.MintURL(), strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if accept != "" {
			req.Header.Set("Accept", accept)
		}
		if auth != "" {
			req.Header.Set("Authorization", "Bearer "+auth)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	good := `{"team":"acme","project":"junior","environment":"production","ttlSeconds":60}`
	for _, auth := range []string{"", "wrong", iss.AdminToken() + "x"} {
		if code, body := post(auth, good); code != 401 || strings.Contains(body, iss.AdminToken()) {
			t.Errorf("admin token %q: %d %s, want 401 without the token", auth, code, body)
		}
	}
	code, body := post(iss.AdminToken(), good)
	if code != 200 {
		t.Fatalf("mint: %d %s", code, body)
	}
	var resp oidcissuer.MintResponse
	if err := json.Unmarshal([]byte(body), &resp); err != nil {
		t.Fatal(err)
	}
	c := payload(t, resp.Token)
	if c["exp"].(float64)-c["iat"].(float64) != 60 || int64(c["exp"].(float64)) != resp.ExpiresAt {
		t.Errorf("ttlSeconds 60: iat %v exp %v expiresAt %d", c["iat"], c["exp"], resp.ExpiresAt)
	}
	// As make dev's banner fetches it: the token alone.
	accept = "text/plain"
	if code, raw := post(iss.AdminToken(), good); code != 200 || payload(t, raw)["sub"] != "owner:acme:project:junior:environment:production" {
		t.Errorf("Accept: text/plain: %d, want the bare token", code)
	}
	accept = ""
	for body, field := range map[string]string{
		`{"team":"acme","project":"junior","environment":"staging"}`:                    "environment",
		`{"team":"Acme!","project":"junior","environment":"production"}`:                "team",
		`{"team":"acme","project":"","environment":"production"}`:                       "project",
		`{"team":"acme","project":"junior","environment":"production","ttlSeconds":-1}`: "ttlSeconds",
		`{"team":"acme","project":"junior","environment":"production","sub":"x"}`:       "unknown field",
	} {
		if code, got := post(iss.AdminToken(), body); code != 400 || !strings.Contains(got, field) {
			t.Errorf("%s: %d %s, want 400 naming %s", body, code, got, field)
		}
	}
}

// TestAuthenticationConfig: the API server's configuration trusts exactly
// the listed functions, maps the documented user and group, and carries the
// CA; an untrustworthy trust is refused.
func TestAuthenticationConfig(t *testing.T) {
	iss := start(t, oidcissuer.Options{})
	raw, err := iss.AuthenticationConfig(oidcissuer.Trust{Team: "acme", Functions: []oidcissuer.Function{
		{Project: "junior", Environment: "production"}, {Project: "junior", Environment: "preview"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		APIVersion, Kind string
		JWT              []struct {
			Issuer struct {
				URL                  string
				CertificateAuthority string `json:"certificateAuthority"`
				Audiences            []string
			}
			ClaimValidationRules []struct{ Expression string } `json:"claimValidationRules"`
			ClaimMappings        struct {
				Username struct{ Claim, Prefix string }
				Groups   struct{ Expression string }
			} `json:"claimMappings"`
		}
	}
	if err := yaml.Unmarshal(raw, &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.APIVersion != "apiserver.config.k8s.io/v1" || cfg.Kind != "AuthenticationConfiguration" || len(cfg.JWT) != 1 {
		t.Fatalf("config:\n%s", raw)
	}
	j := cfg.JWT[0]
	if j.Issuer.URL != iss.IssuerURL("acme") || j.Issuer.CertificateAuthority != string(iss.CAPEM()) ||
		len(j.Issuer.Audiences) != 1 || j.Issuer.Audiences[0] != "https://vercel.com/acme" {
		t.Errorf("issuer %+v", j.Issuer)
	}
	wantRule := "claims.sub in ['owner:acme:project:junior:environment:production', 'owner:acme:project:junior:environment:preview']"
	if len(j.ClaimValidationRules) != 1 || j.ClaimValidationRules[0].Expression != wantRule {
		t.Errorf("claim validation rules %+v, want %s", j.ClaimValidationRules, wantRule)
	}
	if j.ClaimMappings.Username.Claim != "sub" || j.ClaimMappings.Username.Prefix != "vercel:" {
		t.Errorf("username mapping %+v", j.ClaimMappings.Username)
	}
	for _, bad := range []oidcissuer.Trust{
		{Team: "acme"},
		{Team: "acme", Functions: []oidcissuer.Function{{Project: "x') || true || ('", Environment: "production"}}},
		{Team: "acme", Functions: []oidcissuer.Function{{Project: "junior", Environment: "prod"}}},
	} {
		if _, err := iss.AuthenticationConfig(bad); err == nil {
			t.Errorf("AuthenticationConfig(%+v) accepted", bad)
		}
	}
	if _, err := iss.AuthenticationConfig(); err == nil {
		t.Error("AuthenticationConfig() with no trust accepted")
	}
}

// TestDocumentedConfigIsTheTestedOne: docs/clients.md's
// AuthenticationConfiguration, with this issuer's URL and CA in place of
// Vercel's, is exactly what the local control plane runs with (and what
// test/clients' TestOIDC proves), so the documented rules are the tested ones.
func TestDocumentedConfigIsTheTestedOne(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "clients.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(doc), "```yaml\napiVersion: apiserver.config.k8s.io/v1\n")
	if !ok {
		t.Fatal("docs/clients.md has no AuthenticationConfiguration block")
	}
	block, _, _ = strings.Cut(block, "```")
	var documented map[string]any
	if err := yaml.Unmarshal([]byte("apiVersion: apiserver.config.k8s.io/v1\n"+block), &documented); err != nil {
		t.Fatal(err)
	}
	iss := start(t, oidcissuer.Options{})
	jwt := documented["jwt"].([]any)[0].(map[string]any)
	issuer := jwt["issuer"].(map[string]any)
	if issuer["url"] != "https://oidc.vercel.com/acme" {
		t.Fatalf("the documented issuer is %v, want Vercel's for team acme", issuer["url"])
	}
	issuer["url"], issuer["certificateAuthority"] = iss.IssuerURL("acme"), string(iss.CAPEM())
	raw, err := iss.AuthenticationConfig(oidcissuer.Trust{Team: "acme", Functions: []oidcissuer.Function{{Project: "junior", Environment: "production"}}})
	if err != nil {
		t.Fatal(err)
	}
	var generated map[string]any
	if err := yaml.Unmarshal(raw, &generated); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(documented, generated) {
		want, _ := yaml.Marshal(documented)
		t.Errorf("docs/clients.md's configuration:\n%s\nthe local control plane's:\n%s", want, raw)
	}
}
