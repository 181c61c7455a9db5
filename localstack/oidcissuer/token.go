package oidcissuer

import (
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"math/big"
	"regexp"
	"time"
)

// DefaultTTL is how long a minted token is valid: a Vercel function's token
// lives about an hour and is replaced before it runs out, so a client must
// fetch the current one per request rather than keep one.
const DefaultTTL = time.Hour

// Environments are the values Vercel puts in the `environment` claim.
var Environments = []string{"production", "preview", "development"}

// slug is what Vercel allows in team and project names (the URL segments).
var slug = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,99}$`)

// Token says which function a token identifies and for whom.
type Token struct {
	// Team is the team's slug: `owner`, and the issuer's and the default
	// audience's last path segment.
	Team string `json:"team"`
	// TeamID is `owner_id`; "team_" + Team when empty.
	TeamID string `json:"teamID,omitempty"`
	// Project is the project's name: `project`.
	Project string `json:"project"`
	// ProjectID is `project_id`; "prj_" + Project when empty.
	ProjectID string `json:"projectID,omitempty"`
	// Environment is production, preview or development.
	Environment string `json:"environment"`
	// Audience is `aud`; Audience(Team) when empty, as Vercel's default.
	Audience string `json:"audience,omitempty"`
	// TTL is exp - iat; DefaultTTL when zero.
	TTL time.Duration `json:"-"`
	// IssuedAt is `iat` and `nbf`; the issuer's clock when zero. A time in
	// the past with a short TTL makes an expired token.
	IssuedAt time.Time `json:"-"`
}

// Subject is the `sub` Vercel gives the function.
func (t Token) Subject() string {
	return "owner:" + t.Team + ":project:" + t.Project + ":environment:" + t.Environment
}

// validate refuses what Vercel would never issue, naming the field.
func (t Token) validate() error {
	switch {
	case !slug.MatchString(t.Team):
		return fmt.Errorf("team %q: want a slug of lowercase letters, digits, '.', '_' and '-'", t.Team)
	case !slug.MatchString(t.Project):
		return fmt.Errorf("project %q: want a slug of lowercase letters, digits, '.', '_' and '-'", t.Project)
	case t.TTL < 0:
		return fmt.Errorf("ttl %s: must not be negative", t.TTL)
	}
	for _, e := range Environments {
		if t.Environment == e {
			return nil
		}
	}
	return fmt.Errorf("environment %q: want one of %v", t.Environment, Environments)
}

// claims is the payload of a minted token.
type claims struct {
	Issuer      string `json:"iss"`
	Subject     string `json:"sub"`
	Audience    string `json:"aud"`
	IssuedAt    int64  `json:"iat"`
	NotBefore   int64  `json:"nbf"`
	Expiry      int64  `json:"exp"`
	ID          string `json:"jti"`
	Owner       string `json:"owner"`
	OwnerID     string `json:"owner_id"`
	Project     string `json:"project"`
	ProjectID   string `json:"project_id"`
	Environment string `json:"environment"`
}

// Mint signs a token (RS256, the kid of JWKS()). Each token carries a random
// `jti`, so two minted in the same second still differ, as a refreshed
// Vercel token does.
func (i *Issuer) Mint(t Token) (string, error) {
	if err := t.validate(); err != nil {
		return "", err
	}
	if t.TeamID == "" {
		t.TeamID = "team_" + t.Team
	}
	if t.ProjectID == "" {
		t.ProjectID = "prj_" + t.Project
	}
	if t.Audience == "" {
		t.Audience = Audience(t.Team)
	}
	if t.TTL == 0 {
		t.TTL = DefaultTTL
	}
	if t.IssuedAt.IsZero() {
		t.IssuedAt = i.now()
	}
	c := claims{
		Issuer: i.IssuerURL(t.Team), Subject: t.Subject(), Audience: t.Audience,
		IssuedAt: t.IssuedAt.Unix(), NotBefore: t.IssuedAt.Unix(), Expiry: t.IssuedAt.Add(t.TTL).Unix(),
		ID:    randomHex(16),
		Owner: t.Team, OwnerID: t.TeamID, Project: t.Project, ProjectID: t.ProjectID, Environment: t.Environment,
	}
	tok, err := i.sign(c)
	if err == nil {
		i.minted.Add(1)
	}
	return tok, err
}

func (i *Issuer) sign(c claims) (string, error) {
	header, err := json.Marshal(map[string]string{"alg": "RS256", "typ": "JWT", "kid": i.kid})
	if err != nil {
		return "", err
	}
	payload, err := json.Marshal(c)
	if err != nil {
		return "", err
	}
	signingInput := b64.EncodeToString(header) + "." + b64.EncodeToString(payload)
	digest := sha256.Sum256([]byte(signingInput))
	sig, err := rsa.SignPKCS1v15(rand.Reader, i.key, crypto.SHA256, digest[:])
	if err != nil {
		return "", err
	}
	return signingInput + "." + b64.EncodeToString(sig), nil
}

// JWKS is the public key set (RFC 7517) that verifies every team's tokens.
func (i *Issuer) JWKS() []byte {
	pub := i.key.PublicKey
	set := map[string]any{"keys": []map[string]string{{
		"kty": "RSA", "use": "sig", "alg": "RS256", "kid": i.kid,
		"n": b64.EncodeToString(pub.N.Bytes()), "e": b64.EncodeToString(big.NewInt(int64(pub.E)).Bytes()),
	}}}
	out, err := json.Marshal(set)
	if err != nil {
		panic(err) // a map of strings always marshals
	}
	return out
}
