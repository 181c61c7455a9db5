package emulator

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/hmac"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/getsentry/sandbox-controller/internal/vercel"
)

// Test keys: testJWKS holds the public halves of testRSAKey and testECKey.
var (
	testRSAKey = mustRSAKey()
	testECKey  = mustECKey()
	testJWKS   = jwksOf(map[string]any{"rsa-1": &testRSAKey.PublicKey, "ec-1": &testECKey.PublicKey})
)

func mustRSAKey() *rsa.PrivateKey {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		panic(err)
	}
	return k
}

func mustECKey() *ecdsa.PrivateKey {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		panic(err)
	}
	return k
}

// jwksOf encodes public keys by kid as a JWKS document.
func jwksOf(keys map[string]any) []byte {
	b64 := base64.RawURLEncoding
	var set []map[string]string
	for kid, k := range keys {
		switch k := k.(type) {
		case *rsa.PublicKey:
			set = append(set, map[string]string{"kty": "RSA", "kid": kid, "alg": "RS256", "use": "sig",
				"n": b64.EncodeToString(k.N.Bytes()), "e": b64.EncodeToString(big.NewInt(int64(k.E)).Bytes())})
		case *ecdsa.PublicKey:
			raw, err := k.Bytes()
			if err != nil {
				panic(err)
			}
			set = append(set, map[string]string{"kty": "EC", "kid": kid, "crv": "P-256", "alg": "ES256",
				"x": b64.EncodeToString(raw[1:33]), "y": b64.EncodeToString(raw[33:])})
		}
	}
	out, err := json.Marshal(map[string]any{"keys": set})
	if err != nil {
		panic(err)
	}
	return out
}

// signJWT signs claims with key (an *rsa.PrivateKey, *ecdsa.PrivateKey, or a
// []byte HMAC secret for HS256); pub only picks the alg name.
func signJWT(pub any, key any, kid string, claims map[string]any) string {
	b64 := base64.RawURLEncoding
	alg := "RS256"
	switch key.(type) {
	case *ecdsa.PrivateKey:
		alg = "ES256"
	case []byte:
		alg = "HS256"
	}
	h, _ := json.Marshal(map[string]string{"alg": alg, "typ": "JWT", "kid": kid})
	p, _ := json.Marshal(claims)
	signing := b64.EncodeToString(h) + "." + b64.EncodeToString(p)
	digest := sha256.Sum256([]byte(signing))
	var sig []byte
	switch k := key.(type) {
	case *rsa.PrivateKey:
		s, err := rsa.SignPKCS1v15(rand.Reader, k, crypto.SHA256, digest[:])
		if err != nil {
			panic(err)
		}
		sig = s
	case *ecdsa.PrivateKey:
		r, s, err := ecdsa.Sign(rand.Reader, k, digest[:])
		if err != nil {
			panic(err)
		}
		sig = append(r.FillBytes(make([]byte, 32)), s.FillBytes(make([]byte, 32))...)
	case []byte:
		m := hmac.New(sha256.New, k)
		m.Write([]byte(signing))
		sig = m.Sum(nil)
	}
	return signing + "." + b64.EncodeToString(sig)
}

// unsignedJWT is a JWT-shaped token with the given header and no valid signature.
func unsignedJWT(header string, claims map[string]any) string {
	b64 := base64.RawURLEncoding
	p, _ := json.Marshal(claims)
	return b64.EncodeToString([]byte(header)) + "." + b64.EncodeToString(p) + ".c2lnbmF0dXJl"
}

// TestAuthAcceptsOnlyThePrintedToken: without a key set, the emulator's token
// is the only credential; JWT-shaped tokens (signed or not) are refused.
func TestAuthAcceptsOnlyThePrintedToken(t *testing.T) {
	te := newEnv(t, Options{})
	claims := map[string]any{"owner_id": "team_a", "project_id": "prj_a", "exp": time.Now().Add(time.Hour).Unix()}
	for name, tok := range map[string]string{
		"unsigned jwt":    unsignedJWT(`{"alg":"RS256","typ":"JWT"}`, claims),
		"alg none":        unsignedJWT(`{"alg":"none","typ":"JWT"}`, claims),
		"signed jwt":      jwt(claims),
		"token prefix":    testToken[:len(testToken)-1],
		"token extended":  testToken + "x",
		"token uppercase": strings.ToUpper(testToken),
	} {
		if r := te.reqTok(tok, "GET", "/v2/sandboxes?project=prj_a&teamId=team_a", nil); r.status != 403 || r.errCode() != "forbidden" {
			t.Errorf("%s: %d %s, want 403 forbidden", name, r.status, r.body)
		}
		if r := te.reqTok(tok, "GET", "/_emulator/state", nil); r.status != 403 {
			t.Errorf("%s on admin: %d, want 403", name, r.status)
		}
	}
	if r := te.req("GET", "/v2/sandboxes?project=prj_a", nil); r.status != 200 {
		t.Fatalf("printed token: %d %s", r.status, r.body)
	}
	// The real client with an OIDC token that was not signed by a trusted key.
	c, err := vercel.New(vercel.Config{BaseURL: te.srv.URL, OIDCToken: unsignedJWT(`{"alg":"RS256","typ":"JWT"}`, claims), MaxRetries: -1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.ListSandboxes(context.Background(), vercel.ListSandboxesOptions{}); !vercel.IsUnauthorized(err) {
		t.Fatalf("client with unsigned OIDC token: %v, want 403", err)
	}
}

func TestTokenMatches(t *testing.T) {
	e := &Emulator{token: "emu_secret"}
	for tok, want := range map[string]bool{"emu_secret": true, "": false, "emu_secre": false, "emu_secretx": false, "EMU_SECRET": false} {
		if got := e.tokenMatches(tok); got != want {
			t.Errorf("tokenMatches(%q) = %v, want %v", tok, got, want)
		}
	}
}

// TestOIDCVerified: with a key set, an OIDC token is accepted only with a valid
// RS256 or ES256 signature of a configured key and valid claims.
func TestOIDCVerified(t *testing.T) {
	te := newEnv(t, Options{OIDCJWKS: testJWKS, OIDCIssuer: "https://oidc.vercel.com/team_a"})
	now := time.Now()
	good := map[string]any{"owner_id": "team_a", "project_id": "prj_a", "iss": "https://oidc.vercel.com/team_a", "aud": "https://vercel.com/team_a",
		"exp": now.Add(time.Hour).Unix()}
	with := func(k string, v any) map[string]any {
		c := map[string]any{}
		for kk, vv := range good {
			c[kk] = vv
		}
		if v == nil {
			delete(c, k)
		} else {
			c[k] = v
		}
		return c
	}
	otherRSA := mustRSAKey()
	rsaTok := jwt(good)
	parts := strings.Split(rsaTok, ".")
	forged, _ := json.Marshal(with("owner_id", "team_b"))
	tampered := parts[0] + "." + base64.RawURLEncoding.EncodeToString(forged) + "." + parts[2]
	// HS256 keyed with the public key's bytes: the classic algorithm confusion.
	hs := signJWT(nil, []byte(testJWKS), "rsa-1", good)

	for _, tc := range []struct {
		name   string
		tok    string
		status int
	}{
		{"RS256", rsaTok, 200},
		{"ES256", signJWT(&testECKey.PublicKey, testECKey, "ec-1", good), 200},
		{"ES256 without kid", signJWT(&testECKey.PublicKey, testECKey, "", good), 200},
		{"unsigned", unsignedJWT(`{"alg":"RS256","typ":"JWT"}`, good), 403},
		{"alg none", unsignedJWT(`{"alg":"none"}`, good) + "", 403},
		{"HS256 confusion", hs, 403},
		{"other key", signJWT(&otherRSA.PublicKey, otherRSA, "rsa-1", good), 403},
		{"tampered payload", tampered, 403},
		{"expired", jwt(with("exp", now.Add(-time.Minute).Unix())), 403},
		{"no exp", jwt(with("exp", nil)), 403},
		{"not yet valid", jwt(with("nbf", now.Add(time.Hour).Unix())), 403},
		{"other issuer", jwt(with("iss", "https://evil.example")), 403},
		{"no project", jwt(with("project_id", nil)), 403},
		{"another audience", jwt(with("aud", "sts.amazonaws.com")), 403},
		{"no audience", jwt(with("aud", nil)), 403},
		{"audiences including the team's", jwt(with("aud", []string{"sts.amazonaws.com", "https://vercel.com/team_a"})), 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := te.reqTok(tc.tok, "GET", "/v2/sandboxes", nil)
			if r.status != tc.status {
				t.Fatalf("status %d, want %d: %s", r.status, tc.status, r.body)
			}
			if tc.status != 200 && (r.errCode() != "forbidden" || strings.Contains(string(r.body), tc.tok)) {
				t.Fatalf("bad refusal: %s", r.body)
			}
		})
	}

	// The real client, authenticating with a verified token, is scoped to its
	// project; the printed token still works alongside.
	c, err := vercel.New(vercel.Config{BaseURL: te.srv.URL, OIDCToken: signJWT(&testECKey.PublicKey, testECKey, "ec-1", good)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := c.CreateSandbox(ctx, vercel.CreateSandboxRequest{Name: "oidc-made"}); err != nil {
		t.Fatalf("create with a verified OIDC token: %v", err)
	}
	list, err := c.ListSandboxes(ctx, vercel.ListSandboxesOptions{})
	if err != nil || len(list.Sandboxes) != 1 || list.Sandboxes[0].Name != "oidc-made" {
		t.Fatalf("list with a verified OIDC token: %+v %v", list, err)
	}
	if r := te.req("GET", "/v2/sandboxes?project=prj_emulator", nil); r.status != 200 {
		t.Fatalf("printed token with OIDC enabled: %d", r.status)
	}
	// The admin endpoints never take OIDC tokens.
	if r := te.reqTok(rsaTok, "GET", "/_emulator/state", nil); r.status != 403 {
		t.Fatalf("OIDC token on admin: %d", r.status)
	}
}

func TestNewRefusesBadJWKS(t *testing.T) {
	small, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	for name, jwks := range map[string]string{
		"not json":  "{",
		"no keys":   `{"keys":[]}`,
		"symmetric": `{"keys":[{"kty":"oct","k":"c2VjcmV0"}]}`,
		"P-384":     `{"keys":[{"kty":"EC","crv":"P-384","x":"AA","y":"AA"}]}`,
		"small RSA": string(jwksOf(map[string]any{"s": &small.PublicKey})),
	} {
		e, err := New(Options{Exec: "none", OIDCJWKS: []byte(jwks)})
		if err == nil {
			_ = e.Close()
			t.Errorf("%s: New succeeded", name)
		}
	}
}
