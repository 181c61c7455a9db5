package main

import (
	"context"
	"crypto"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
)

// This file verifies the vercel-sandbox-oidc-token of a forwarded request
// the way @vercel/sandbox's defineSandboxProxy does (dist/proxy.js with
// jose 6): RS256 only, an allowlisted issuer checked before anything is
// fetched, the key from <iss>/.well-known/jwks, aud equal to the forward
// URL, exp with 60 s of clock tolerance, and the team_id, project_id and
// sandbox_id claims present. It is written with the standard library so the
// example shows every check instead of hiding them in a JWT library.

// The SDK's and jose's numbers, so the broker behaves as the SDK's handler.
const (
	clockTolerance = 60 * time.Second // CLOCK_TOLERANCE_SECONDS in proxy.js
	jwksMaxAge     = 10 * time.Minute // jose's cacheMaxAge
	jwksCooldown   = 30 * time.Second // jose's cooldownDuration: refetch for an unknown kid at most this often
	jwksTimeout    = 5 * time.Second  // jose's timeoutDuration
	jwksMaxBytes   = 1 << 20
	minRSABits     = 2048 // jose refuses smaller RS256 keys
)

// Identity is what a verified token says about the calling sandbox.
type Identity struct {
	TeamID, ProjectID, SandboxID, SandboxName string
}

// verifier checks tokens against the JWKS of a fixed set of issuers.
type verifier struct {
	issuers map[string]bool
	client  *http.Client
	now     func() time.Time

	mu   sync.Mutex
	sets map[string]*keySet // by issuer
}

func newVerifier(issuers []string, client *http.Client, now func() time.Time) *verifier {
	v := &verifier{issuers: map[string]bool{}, client: client, now: now, sets: map[string]*keySet{}}
	for _, iss := range issuers {
		v.issuers[iss] = true
	}
	if v.client == nil {
		v.client = &http.Client{}
	}
	if v.client.Timeout == 0 {
		c := *v.client
		c.Timeout = jwksTimeout // a stalled issuer must not hold requests
		v.client = &c
	}
	if v.now == nil {
		v.now = time.Now
	}
	return v
}

type jwtHeader struct {
	Alg  string   `json:"alg"`
	Kid  string   `json:"kid"`
	Crit []string `json:"crit"`
}

// verify returns the token's identity if it is valid for aud. Its errors
// are for the broker's log only: they name the check that failed, never
// the token.
func (v *verifier) verify(ctx context.Context, token, aud string) (Identity, error) {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return Identity{}, errors.New("not a compact JWS")
	}
	var hdr jwtHeader
	if err := decodeSegment(parts[0], &hdr); err != nil {
		return Identity{}, fmt.Errorf("header: %w", err)
	}
	// Only RS256: "none" and HS256 (keyed with the public key) are the
	// classic forgeries.
	if hdr.Alg != "RS256" {
		return Identity{}, fmt.Errorf("alg %q is not RS256", hdr.Alg)
	}
	if len(hdr.Crit) > 0 {
		return Identity{}, errors.New("unsupported crit header")
	}
	var claims map[string]any
	if err := decodeSegment(parts[1], &claims); err != nil {
		return Identity{}, fmt.Errorf("claims: %w", err)
	}
	// The issuer is checked before its JWKS is fetched: the token must not
	// choose where the broker connects.
	iss, _ := claims["iss"].(string)
	if !v.issuers[iss] {
		return Identity{}, fmt.Errorf("issuer %q is not allowed", iss)
	}
	if err := v.checkSignature(ctx, iss, hdr.Kid, parts); err != nil {
		return Identity{}, err
	}
	if err := checkTimes(claims, v.now()); err != nil {
		return Identity{}, err
	}
	if !audienceMatches(claims["aud"], aud) {
		return Identity{}, errors.New("aud is not this forward URL")
	}
	return identityOf(claims)
}

func (v *verifier) checkSignature(ctx context.Context, iss, kid string, parts []string) error {
	sig, err := base64.RawURLEncoding.DecodeString(parts[2])
	if err != nil {
		return errors.New("signature is not base64url")
	}
	digest := sha256.Sum256([]byte(parts[0] + "." + parts[1]))
	keys, err := v.keySet(iss).candidates(ctx, v, kid)
	if err != nil {
		return err
	}
	for _, k := range keys {
		if rsa.VerifyPKCS1v15(k, crypto.SHA256, digest[:], sig) == nil {
			return nil
		}
	}
	return errors.New("signature does not verify against the issuer's JWKS")
}

// checkTimes: exp is required (the SDK accepts a token without one; a
// broker handing out credentials should not), nbf is honoured when present,
// both with the SDK's tolerance.
func checkTimes(claims map[string]any, now time.Time) error {
	exp, ok := claims["exp"].(float64)
	if !ok {
		return errors.New("no exp claim")
	}
	if now.Add(-clockTolerance).Unix() >= int64(exp) {
		return errors.New("token expired")
	}
	if nbf, ok := claims["nbf"].(float64); ok && now.Add(clockTolerance).Unix() < int64(nbf) {
		return errors.New("token not yet valid")
	}
	return nil
}

// audienceMatches accepts aud as a string or a list, as JWT allows.
func audienceMatches(aud any, want string) bool {
	switch a := aud.(type) {
	case string:
		return a == want
	case []any:
		for _, x := range a {
			if x == want {
				return true
			}
		}
	}
	return false
}

// identityOf is the SDK's getProxyMeta: sandbox_name defaults to sandbox_id.
func identityOf(claims map[string]any) (Identity, error) {
	str := func(k string) string { s, _ := claims[k].(string); return s }
	id := Identity{TeamID: str("team_id"), ProjectID: str("project_id"), SandboxID: str("sandbox_id"), SandboxName: str("sandbox_name")}
	if id.SandboxName == "" {
		id.SandboxName = id.SandboxID
	}
	if id.TeamID == "" || id.ProjectID == "" || id.SandboxID == "" {
		return Identity{}, errors.New("missing required claims")
	}
	return id, nil
}

func decodeSegment(s string, v any) error {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return errors.New("not base64url")
	}
	if err := json.Unmarshal(b, v); err != nil {
		return errors.New("not JSON")
	}
	return nil
}

// forwardAudience is what the token's aud must be for this request: the
// SDK's normalizeForwardUrl and getForwardUrlAudience. The request path is
// the forward URL's path followed by the forwarded path, so removing the
// forwarded path leaves the forward URL. The origin is the broker's public
// one from configuration, not the request's Host header: a token minted for
// another broker behind the same issuer cannot be replayed here by naming
// that broker in Host.
func forwardAudience(origin, requestPath, forwardedPath string) (string, error) {
	fp, err := url.Parse(forwardedPath)
	if err != nil || !strings.HasPrefix(forwardedPath, "/") {
		return "", errors.New("forwarded path is not an absolute path")
	}
	fpath := stripTrailingSlash(fp.EscapedPath())
	p := stripTrailingSlash(requestPath)
	if fpath != "/" && strings.HasSuffix(p, fpath) {
		p = stripTrailingSlash(strings.TrimSuffix(p, fpath))
	}
	if p == "/" {
		return origin, nil
	}
	return origin + p, nil
}

func stripTrailingSlash(p string) string {
	if p = strings.TrimRight(p, "/"); p == "" {
		return "/"
	}
	return p
}

// keySet is one issuer's JWKS, cached.
type keySet struct {
	url string

	mu      sync.Mutex // held while fetching: one fetch per issuer at a time
	keys    []jwkKey   // nil until fetched
	fetched time.Time
}

type jwkKey struct {
	kid string
	pub *rsa.PublicKey
}

func (v *verifier) keySet(iss string) *keySet {
	v.mu.Lock()
	defer v.mu.Unlock()
	ks := v.sets[iss]
	if ks == nil {
		ks = &keySet{url: strings.TrimSuffix(iss, "/") + "/.well-known/jwks"}
		v.sets[iss] = ks
	}
	return ks
}

// keys returns the keys a token with this kid may be signed with, fetching
// the JWKS when the cache is stale, or when the kid is unknown and the
// last fetch is older than the cooldown (the issuer rotated its key).
func (ks *keySet) candidates(ctx context.Context, v *verifier, kid string) ([]*rsa.PublicKey, error) {
	ks.mu.Lock()
	defer ks.mu.Unlock()
	now := v.now()
	matching := ks.matching(kid)
	stale := ks.keys == nil || now.Sub(ks.fetched) >= jwksMaxAge
	if !stale && len(matching) == 0 && now.Sub(ks.fetched) >= jwksCooldown {
		stale = true
	}
	if stale {
		keys, err := fetchJWKS(ctx, v.client, ks.url)
		if err != nil {
			return nil, err
		}
		ks.keys, ks.fetched = keys, now
		matching = ks.matching(kid)
	}
	if len(matching) == 0 {
		return nil, errors.New("no JWKS key matches the token's kid")
	}
	return matching, nil
}

// matching: the key named kid, or every key for a token without a kid (as
// jose tries each candidate).
func (ks *keySet) matching(kid string) []*rsa.PublicKey {
	var out []*rsa.PublicKey
	for _, k := range ks.keys {
		if kid == "" || k.kid == kid {
			out = append(out, k.pub)
		}
	}
	return out
}

type jwk struct {
	Kty, Use, Alg, Kid, N, E string
}

func fetchJWKS(ctx context.Context, c *http.Client, u string) ([]jwkKey, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return nil, fmt.Errorf("fetch JWKS: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("fetch JWKS: status %d", resp.StatusCode)
	}
	var set struct{ Keys []jwk }
	if err := json.NewDecoder(io.LimitReader(resp.Body, jwksMaxBytes)).Decode(&set); err != nil {
		return nil, fmt.Errorf("fetch JWKS: %w", err)
	}
	out := []jwkKey{} // not nil: fetched, even if empty
	for _, k := range set.Keys {
		if k.Kty != "RSA" || (k.Use != "" && k.Use != "sig") || (k.Alg != "" && k.Alg != "RS256") {
			continue
		}
		if pub := rsaKey(k); pub != nil {
			out = append(out, jwkKey{kid: k.Kid, pub: pub})
		}
	}
	return out, nil
}

func rsaKey(k jwk) *rsa.PublicKey {
	n, err1 := base64.RawURLEncoding.DecodeString(k.N)
	e, err2 := base64.RawURLEncoding.DecodeString(k.E)
	if err1 != nil || err2 != nil || len(e) == 0 || len(e) > 4 {
		return nil
	}
	pub := &rsa.PublicKey{N: new(big.Int).SetBytes(n), E: int(new(big.Int).SetBytes(e).Int64())}
	if pub.N.BitLen() < minRSABits || pub.E < 3 {
		return nil
	}
	return pub
}
