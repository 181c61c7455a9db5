// Package oidcissuer is a local OpenID Connect issuer shaped like Vercel's
// (team issuer mode): one issuer per team under one HTTPS server, discovery
// and a JSON Web Key Set for each, and tokens with the claims Vercel gives a
// function (`sub` owner:<team>:project:<project>:environment:<env>, `owner`,
// `owner_id`, `project`, `project_id`, `environment`). The local control plane
// trusts it through kube-apiserver's JWT authenticator
// (AuthenticationConfig), so the path docs/clients.md describes for serverless
// clients runs end to end without Vercel.
//
// It is part of the local stack (tests and `make dev`); the operator never
// links it. The emulator verifies the same tokens for its own API when given
// JWKS() (emulator.Options.OIDCJWKS): signing lives here, verification there.
package oidcissuer

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/subtle"
	"crypto/tls"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"sync/atomic"
	"time"
)

// Issuer is a running issuer.
type Issuer struct {
	key *rsa.PrivateKey
	kid string
	// adminToken guards the mint endpoint: whoever can mint can act as any
	// function the API server trusts.
	adminToken string
	ca         []byte // PEM of the CA that signed the serving certificate
	baseURL    string // https://127.0.0.1:port
	srv        *http.Server
	ln         net.Listener
	now        func() time.Time
	minted     atomic.Int64
}

// Options says how to start an issuer.
type Options struct {
	// Addr is the listen address; "127.0.0.1:0" when empty.
	Addr string
	// Now is the clock tokens are stamped with; time.Now when nil.
	Now func() time.Time
}

// Start generates a signing key, a CA and a serving certificate for the
// loopback addresses, and serves HTTPS on opts.Addr.
func Start(opts Options) (*Issuer, error) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	i := &Issuer{key: key, now: opts.Now, kid: randomHex(8), adminToken: randomHex(32)}
	if i.now == nil {
		i.now = time.Now
	}
	addr := opts.Addr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	if i.ln, err = net.Listen("tcp", addr); err != nil {
		return nil, fmt.Errorf("OIDC issuer: listen on %s: %w", addr, err)
	}
	cert, caPEM, err := servingCertificate()
	if err != nil {
		_ = i.ln.Close()
		return nil, err
	}
	i.ca = caPEM
	i.baseURL = "https://" + i.ln.Addr().String()
	i.srv = &http.Server{
		Handler:           i.routes(),
		ReadHeaderTimeout: 10 * time.Second,
		// A client that does not trust the CA is its own problem, not
		// something to print into the test's or make dev's terminal.
		ErrorLog:  log.New(io.Discard, "", 0),
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
	}
	go func() { _ = i.srv.ServeTLS(i.ln, "", "") }()
	return i, nil
}

// Close stops serving.
func (i *Issuer) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := i.srv.Shutdown(ctx)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// URL is where the issuer serves (https://127.0.0.1:port), without a team.
func (i *Issuer) URL() string { return i.baseURL }

// IssuerURL is the `iss` of the team's tokens, as https://oidc.vercel.com/<team>
// is on Vercel; its discovery document is below it.
func (i *Issuer) IssuerURL(team string) string { return i.baseURL + "/" + team }

// Audience is the team's default audience, as on Vercel.
func Audience(team string) string { return "https://vercel.com/" + team }

// CAPEM is the PEM certificate of the CA that signed the serving
// certificate: what the API server (and curl) must trust.
func (i *Issuer) CAPEM() []byte { return append([]byte(nil), i.ca...) }

// AdminToken is the bearer token of the mint endpoint (POST /_issuer/token).
// It is a secret: whoever holds it can mint any function's identity.
func (i *Issuer) AdminToken() string { return i.adminToken }

// MintURL is the admin endpoint that mints a token (see serveMint).
func (i *Issuer) MintURL() string { return i.baseURL + mintPath }

// Minted is how many tokens were minted, through Mint or the endpoint.
func (i *Issuer) Minted() int64 { return i.minted.Load() }

// adminAuthorized compares the bearer token in constant time.
func (i *Issuer) adminAuthorized(r *http.Request) bool {
	const prefix = "Bearer "
	h := r.Header.Get("Authorization")
	if len(h) <= len(prefix) || h[:len(prefix)] != prefix {
		return false
	}
	return subtle.ConstantTimeCompare([]byte(h[len(prefix):]), []byte(i.adminToken)) == 1
}

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand never fails on Linux
	}
	return hex.EncodeToString(b)
}

var b64 = base64.RawURLEncoding
