package egress_test

import (
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/getsentry/sandbox-controller/localstack/emulator/egress"
)

const issuer = "https://emulator.example.com"

// verifyToken checks an RS256 JWT against a JWKS document the way
// defineSandboxProxy does (signature, iss, aud, exp with 60 s tolerance)
// and returns its claims.
func verifyToken(jwks []byte, token, wantAud string, now time.Time) (map[string]any, error) {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return nil, errors.New("not a compact JWT")
	}
	var hdr struct{ Alg, Kid string }
	if err := decodeSegment(parts[0], &hdr); err != nil || hdr.Alg != "RS256" {
		return nil, fmt.Errorf("header: alg %q, %v", hdr.Alg, err)
	}
	if err := verifySignature(jwks, hdr.Kid, parts); err != nil {
		return nil, err
	}
	var claims map[string]any
	if err := decodeSegment(parts[1], &claims); err != nil {
		return nil, err
	}
	if claims["iss"] != issuer || claims["aud"] != wantAud {
		return nil, fmt.Errorf("iss %v aud %v", claims["iss"], claims["aud"])
	}
	exp, _ := claims["exp"].(float64)
	iat, _ := claims["iat"].(float64)
	if now.Unix() > int64(exp)+60 || exp-iat > 600 || exp <= iat {
		return nil, fmt.Errorf("exp %v iat %v at %v", exp, iat, now.Unix())
	}
	return claims, nil
}

// verifySignature checks the RS256 signature with the JWKS key named kid.
func verifySignature(jwks []byte, kid string, parts []string) error {
	var set struct {
		Keys []struct{ Kty, Kid, Alg, N, E string }
	}
	if err := json.Unmarshal(jwks, &set); err != nil {
		return err
	}
	sig, err := base64.RawURLEncoding.DecodeString(parts[2])
	if err != nil {
		return err
	}
	digest := sha256.Sum256([]byte(parts[0] + "." + parts[1]))
	for _, k := range set.Keys {
		if k.Kty != "RSA" || k.Kid != kid {
			continue
		}
		n, _ := base64.RawURLEncoding.DecodeString(k.N)
		e, _ := base64.RawURLEncoding.DecodeString(k.E)
		pub := &rsa.PublicKey{N: new(big.Int).SetBytes(n), E: int(new(big.Int).SetBytes(e).Int64())}
		if rsa.VerifyPKCS1v15(pub, crypto.SHA256, digest[:], sig) == nil {
			return nil
		}
	}
	return errors.New("signature does not verify against the JWKS")
}

func decodeSegment(s string, v any) error {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

// forgeToken signs the given claims with a key the proxy never had.
func forgeToken(t *testing.T, kid string, claims map[string]any) string {
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

// originalURL rebuilds the sandbox's URL from the forwarding headers as
// defineSandboxProxy's getProxiedRequestUrl does.
func originalURL(s seen) string {
	origin := s.Header.Get("Vercel-Forwarded-Scheme") + "://" + s.Header.Get("Vercel-Forwarded-Host") + ":" + s.Header.Get("Vercel-Forwarded-Port")
	if p := s.Header.Get("Vercel-Forwarded-Path"); p != "/" {
		return origin + p
	}
	return origin
}

// audienceFromRequest is defineSandboxProxy's normalizeForwardUrl and
// getForwardUrlAudience: the broker's request URL minus the forwarded path.
func audienceFromRequest(brokerOrigin string, s seen) string {
	fp, _ := url.Parse(s.Header.Get("Vercel-Forwarded-Path"))
	fpath := strings.TrimRight(fp.Path, "/")
	if fpath == "" {
		fpath = "/"
	}
	p := strings.TrimRight(s.Path, "/")
	if fpath != "/" && strings.HasSuffix(p, fpath) {
		p = strings.TrimRight(strings.TrimSuffix(p, fpath), "/")
	}
	if p == "" || p == "/" {
		return brokerOrigin
	}
	return brokerOrigin + p
}

// TestForwardURL: a matching request goes to the broker with the forwarding
// headers and a token that verifies against JWKS and names the sandbox; a
// token the sandbox pre-sets is replaced; a forged token does not verify;
// the forward URL (which carries a secret) appears in no log and no answer.
func TestForwardURL(t *testing.T) {
	ca := newUpstreamCA(t)
	broker := newUpstream(t, ca, true, "broker.example.com")
	gh := newUpstream(t, ca, true, "api.github.com")
	forwardURL := "https://broker.example.com/egress/" + canary + "/"
	pol := fmt.Sprintf(`{"allow":{"api.github.com":[{"match":{"path":{"startsWith":"/repos/"}},"forwardURL":%q}]}}`, forwardURL)
	h := start(t, egress.Options{Hosts: map[string]string{"broker.example.com": broker.addr(), "api.github.com": gh.addr()},
		Issuer: issuer}, newSession(t, pol), ca)
	c := h.client(t)

	code, body := do(t, c, "POST", "https://api.github.com/repos/getsentry/junior/issues?per_page=5",
		map[string]string{"Vercel-Sandbox-Oidc-Token": "sandbox-made-this", "X-Custom": "kept"}, "payload")
	if code != 200 || body != "upstream broker.example.com /egress/"+canary+"/repos/getsentry/junior/issues" {
		t.Fatalf("forwarded request: %d %q", code, body)
	}
	if code, _ := do(t, c, "GET", "https://api.github.com/user", nil, ""); code != 200 || len(gh.requests()) != 1 {
		t.Fatalf("an unmatched request should reach api.github.com itself: %d, %d requests", code, len(gh.requests()))
	}
	reqs := broker.requests()
	if len(reqs) != 1 {
		t.Fatalf("broker saw %d requests", len(reqs))
	}
	token := checkBrokerRequest(t, h.p.JWKS(), reqs[0], forwardURL)
	if strings.Contains(h.logs.all(), canary) || strings.Contains(h.logs.all(), token) {
		t.Errorf("logs carry the forward URL or the token:\n%s", h.logs.all())
	}
}

// TestForwardURLUnreachable: a broker that is down gets a 502 whose body and
// log line name the sandbox's destination, never the forward URL.
func TestForwardURLUnreachable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	closed := l.Addr().String()
	must(t, l.Close())
	pol := fmt.Sprintf(`{"allow":{"api.github.com":[{"forwardURL":"https://broker.example.com/x/%s"}]}}`, canary)
	h := start(t, egress.Options{Hosts: map[string]string{"broker.example.com": closed}, Issuer: issuer}, newSession(t, pol), nil)
	code, body := do(t, h.client(t), "GET", "http://api.github.com/repos", nil, "")
	if code != 502 || strings.Contains(body, canary) || !strings.Contains(body, "api.github.com") {
		t.Errorf("unreachable broker: %d %q", code, body)
	}
	if l := h.logs.all(); strings.Contains(l, canary) || !strings.Contains(l, "failed") {
		t.Errorf("logs:\n%s", l)
	}
}

// checkBrokerRequest checks what the broker received for the forwarded
// POST and returns the token it carried.
func checkBrokerRequest(t *testing.T, jwks []byte, r seen, forwardURL string) string {
	t.Helper()
	if r.Method != "POST" || r.Body != "payload" || r.Query != "per_page=5" || r.Host != "broker.example.com" || r.Header.Get("X-Custom") != "kept" {
		t.Errorf("broker request: %+v", r)
	}
	if got := originalURL(r); got != "https://api.github.com:443/repos/getsentry/junior/issues?per_page=5" {
		t.Errorf("rebuilt original URL %q", got)
	}
	aud := audienceFromRequest("https://broker.example.com", r)
	if want := strings.TrimSuffix(forwardURL, "/"); aud != want {
		t.Errorf("audience from the broker's request %q, want %q", aud, want)
	}
	token := r.Header.Get("Vercel-Sandbox-Oidc-Token")
	claims, err := verifyToken(jwks, token, aud, time.Now())
	if err != nil {
		t.Fatalf("token does not verify: %v", err)
	}
	for k, want := range map[string]string{"team_id": "team_abc", "project_id": "prj_123", "sandbox_id": "sbx_42", "sandbox_name": "junior-conv-7"} {
		if claims[k] != want {
			t.Errorf("claim %s = %v, want %s", k, claims[k], want)
		}
	}
	if _, err := verifyToken(jwks, token, aud, time.Now().Add(10*time.Minute)); err == nil {
		t.Errorf("the token still verifies ten minutes later")
	}

	checkForgeries(t, jwks, token, aud, claims)
	return token
}

// checkForgeries: a token signed by another key, or the proxy's signature
// over altered claims, does not verify.
func checkForgeries(t *testing.T, jwks []byte, token, aud string, claims map[string]any) {
	t.Helper()
	// Forged: same claims and kid, another key.
	var hdr struct{ Kid string }
	must(t, decodeSegment(strings.Split(token, ".")[0], &hdr))
	if _, err := verifyToken(jwks, forgeToken(t, hdr.Kid, claims), aud, time.Now()); err == nil {
		t.Errorf("a token signed by another key verifies")
	}
	// Tampered: the proxy's signature over other claims.
	parts := strings.Split(token, ".")
	claims["sandbox_id"] = "sbx_other"
	b, _ := json.Marshal(claims)
	if _, err := verifyToken(jwks, parts[0]+"."+base64.RawURLEncoding.EncodeToString(b)+"."+parts[2], aud, time.Now()); err == nil {
		t.Errorf("a token with altered claims verifies")
	}
}
