package egress

import (
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/big"
	"net/url"
	"strings"
	"time"
)

// This file signs the token a forwardURL request carries in
// vercel-sandbox-oidc-token, in the shape the SDK's defineSandboxProxy
// verifies (dist/proxy.js): an RS256 JWT whose iss serves its keys at
// <iss>/.well-known/jwks, whose aud is the forward URL's origin and path
// without a trailing slash, with team_id, project_id, sandbox_id and
// sandbox_name claims.

// tokenLifetime bounds a token's use: each forwarded request gets a fresh one.
const tokenLifetime = 5 * time.Minute

type signer struct {
	key *rsa.PrivateKey
	kid string
}

func newSigner() (*signer, error) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, fmt.Errorf("generate signing key: %w", err)
	}
	sum := sha256.Sum256(key.N.Bytes())
	return &signer{key: key, kid: hex.EncodeToString(sum[:8])}, nil
}

// jwks is the JSON Web Key Set with the public half of the signing key.
func (s *signer) jwks() []byte {
	b64 := base64.RawURLEncoding.EncodeToString
	doc := map[string]any{"keys": []map[string]string{{
		"kty": "RSA", "use": "sig", "alg": "RS256", "kid": s.kid,
		"n": b64(s.key.N.Bytes()),
		"e": b64(big.NewInt(int64(s.key.E)).Bytes()),
	}}}
	out, err := json.Marshal(doc)
	if err != nil {
		panic(err) // a map of strings always marshals
	}
	return out
}

// audience is what defineSandboxProxy expects in aud for a forward URL: the
// WHATWG origin (lower-case host, default port dropped) and the path without
// trailing slashes.
func audience(u *url.URL) string {
	host := strings.ToLower(u.Hostname())
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	if port := u.Port(); port != "" && port != "443" {
		host += ":" + port
	}
	return "https://" + host + strings.TrimRight(u.EscapedPath(), "/")
}

// sign returns a compact RS256 JWT for one forwarded request.
func (s *signer) sign(issuer, aud string, id Identity, now time.Time) (string, error) {
	jti := make([]byte, 16)
	if _, err := rand.Read(jti); err != nil {
		return "", err
	}
	name := id.SandboxName
	if name == "" {
		name = id.SandboxID
	}
	header := map[string]string{"alg": "RS256", "typ": "JWT", "kid": s.kid}
	claims := map[string]any{
		"iss": issuer, "aud": aud, "sub": "sandbox:" + id.SandboxID,
		"team_id": id.TeamID, "project_id": id.ProjectID,
		"sandbox_id": id.SandboxID, "sandbox_name": name,
		"iat": now.Unix(), "nbf": now.Unix(), "exp": now.Add(tokenLifetime).Unix(),
		"jti": hex.EncodeToString(jti),
	}
	h, err := json.Marshal(header)
	if err != nil {
		return "", err
	}
	c, err := json.Marshal(claims)
	if err != nil {
		return "", err
	}
	b64 := base64.RawURLEncoding.EncodeToString
	signing := b64(h) + "." + b64(c)
	digest := sha256.Sum256([]byte(signing))
	sig, err := rsa.SignPKCS1v15(rand.Reader, s.key, crypto.SHA256, digest[:])
	if err != nil {
		return "", fmt.Errorf("sign forward token: %w", err)
	}
	return signing + "." + b64(sig), nil
}
