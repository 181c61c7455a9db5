package emulator

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"slices"
	"strings"
	"time"
)

// This file verifies Vercel OIDC tokens: JWTs signed with RS256 or ES256 by a
// key of a JSON Web Key Set the emulator was given (Options.OIDCJWKS). Without
// such a set the emulator accepts no OIDC token at all: an unverified JWT is
// just a string anyone can write.

// oidcClaims are the claims of a Vercel OIDC token the emulator uses.
type oidcClaims struct {
	OwnerID   string `json:"owner_id"`
	ProjectID string `json:"project_id"`
	Issuer    string `json:"iss"`
	Exp       int64  `json:"exp"`
	NotBefore int64  `json:"nbf"`
	// Audience is `aud`: a string or an array of strings (RFC 7519 §4.1.3).
	Audience json.RawMessage `json:"aud"`
}

// hasAudience reports whether want is among c's audiences.
func (c *oidcClaims) hasAudience(want string) bool {
	var one string
	if json.Unmarshal(c.Audience, &one) == nil {
		return one == want
	}
	var many []string
	return json.Unmarshal(c.Audience, &many) == nil && slices.Contains(many, want)
}

// jwk is one key of a JSON Web Key Set (RFC 7517), RSA or P-256 only.
type jwk struct {
	Kty string `json:"kty"`
	Kid string `json:"kid"`
	Alg string `json:"alg"`
	Use string `json:"use"`
	N   string `json:"n"`
	E   string `json:"e"`
	Crv string `json:"crv"`
	X   string `json:"x"`
	Y   string `json:"y"`
}

// oidcKey is a parsed verification key.
type oidcKey struct {
	kid string
	alg string // RS256 or ES256
	rsa *rsa.PublicKey
	ec  *ecdsa.PublicKey
}

// oidcVerifier checks the signature and claims of OIDC tokens.
type oidcVerifier struct {
	keys     []oidcKey
	issuer   string // "" = any issuer
	audience string // "" = any audience
}

// newOIDCVerifier parses a JWKS document ({"keys": [...]}). Keys of other
// types or curves are refused, so a typo does not silently disable a key.
func newOIDCVerifier(jwks []byte, issuer, audience string) (*oidcVerifier, error) {
	var set struct {
		Keys []jwk `json:"keys"`
	}
	if err := json.Unmarshal(jwks, &set); err != nil {
		return nil, fmt.Errorf("OIDC JWKS: %w", err)
	}
	if len(set.Keys) == 0 {
		return nil, errors.New("OIDC JWKS: no keys")
	}
	if audience == "" && issuer != "" {
		// Vercel's team issuer https://oidc.vercel.com/<team> mints for
		// https://vercel.com/<team> unless asked for another audience.
		audience = "https://vercel.com/" + issuer[strings.LastIndex(strings.TrimSuffix(issuer, "/"), "/")+1:]
		audience = strings.TrimSuffix(audience, "/")
	}
	v := &oidcVerifier{issuer: issuer, audience: audience}
	for i, k := range set.Keys {
		if k.Use != "" && k.Use != "sig" {
			continue
		}
		key, err := parseJWK(k)
		if err != nil {
			return nil, fmt.Errorf("OIDC JWKS key %d (kid %q): %w", i, k.Kid, err)
		}
		v.keys = append(v.keys, key)
	}
	if len(v.keys) == 0 {
		return nil, errors.New("OIDC JWKS: no signing keys")
	}
	return v, nil
}

func parseJWK(k jwk) (oidcKey, error) {
	b64 := base64.RawURLEncoding
	switch k.Kty {
	case "RSA":
		if k.Alg != "" && k.Alg != "RS256" {
			return oidcKey{}, fmt.Errorf("unsupported alg %q (want RS256)", k.Alg)
		}
		n, err1 := b64.DecodeString(k.N)
		e, err2 := b64.DecodeString(k.E)
		if err1 != nil || err2 != nil || len(n) == 0 || len(e) == 0 || len(e) > 4 {
			return oidcKey{}, errors.New("invalid RSA n or e")
		}
		pub := &rsa.PublicKey{N: new(big.Int).SetBytes(n), E: int(new(big.Int).SetBytes(e).Int64())}
		if pub.N.BitLen() < 2048 {
			return oidcKey{}, fmt.Errorf("RSA key of %d bits is too small (want at least 2048)", pub.N.BitLen())
		}
		return oidcKey{kid: k.Kid, alg: "RS256", rsa: pub}, nil
	case "EC":
		if k.Crv != "P-256" || (k.Alg != "" && k.Alg != "ES256") {
			return oidcKey{}, fmt.Errorf("unsupported curve %q / alg %q (want P-256, ES256)", k.Crv, k.Alg)
		}
		x, err1 := b64.DecodeString(k.X)
		y, err2 := b64.DecodeString(k.Y)
		if err1 != nil || err2 != nil || len(x) != 32 || len(y) != 32 {
			return oidcKey{}, errors.New("invalid EC x or y")
		}
		pub, err := ecdsa.ParseUncompressedPublicKey(elliptic.P256(), append(append([]byte{4}, x...), y...))
		if err != nil {
			return oidcKey{}, err
		}
		return oidcKey{kid: k.Kid, alg: "ES256", ec: pub}, nil
	default:
		return oidcKey{}, fmt.Errorf("unsupported key type %q (want RSA or EC)", k.Kty)
	}
}

// verify checks tok's signature against the key set, then its expiry,
// not-before and issuer, and returns its claims. The error is safe to show
// the client: it never contains the token.
func (v *oidcVerifier) verify(tok string, now time.Time) (*oidcClaims, error) {
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		return nil, errors.New("the token is not a JWT")
	}
	b64 := base64.RawURLEncoding
	rawHeader, err := b64.DecodeString(parts[0])
	if err != nil {
		return nil, errors.New("the JWT header is not base64url")
	}
	var header struct {
		Alg string `json:"alg"`
		Kid string `json:"kid"`
	}
	if err := json.Unmarshal(rawHeader, &header); err != nil {
		return nil, errors.New("the JWT header is not JSON")
	}
	if header.Alg != "RS256" && header.Alg != "ES256" {
		return nil, fmt.Errorf("JWT algorithm %q is not accepted (want RS256 or ES256)", header.Alg)
	}
	sig, err := b64.DecodeString(parts[2])
	if err != nil {
		return nil, errors.New("the JWT signature is not base64url")
	}
	digest := sha256.Sum256([]byte(parts[0] + "." + parts[1]))
	verified := false
	for _, k := range v.keys {
		if k.alg != header.Alg || (header.Kid != "" && k.kid != "" && k.kid != header.Kid) {
			continue
		}
		if k.rsa != nil && rsa.VerifyPKCS1v15(k.rsa, crypto.SHA256, digest[:], sig) == nil {
			verified = true
		}
		if k.ec != nil && len(sig) == 64 &&
			ecdsa.Verify(k.ec, digest[:], new(big.Int).SetBytes(sig[:32]), new(big.Int).SetBytes(sig[32:])) {
			verified = true
		}
		if verified {
			break
		}
	}
	if !verified {
		return nil, errors.New("the JWT signature does not verify with any configured key")
	}
	payload, err := b64.DecodeString(parts[1])
	if err != nil {
		return nil, errors.New("the JWT payload is not base64url")
	}
	var c oidcClaims
	if err := json.Unmarshal(payload, &c); err != nil {
		return nil, errors.New("the JWT payload is not a JSON object of the expected claims")
	}
	switch {
	case c.Exp == 0:
		return nil, errors.New("the OIDC token has no `exp`")
	case c.Exp < now.Unix():
		return nil, errors.New("the OIDC token has expired")
	case c.NotBefore != 0 && c.NotBefore > now.Unix():
		return nil, errors.New("the OIDC token is not valid yet")
	case v.issuer != "" && c.Issuer != v.issuer:
		return nil, errors.New("the OIDC token has another issuer")
	case c.OwnerID == "" || c.ProjectID == "":
		return nil, errors.New("the OIDC token has no `owner_id`/`project_id`")
	case v.audience != "" && !c.hasAudience(v.audience):
		return nil, errors.New("the OIDC token is for another audience")
	}
	return &c, nil
}
