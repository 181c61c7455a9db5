package oidcissuer

import (
	"encoding/json"
	"fmt"
	"net/http"
	"time"
)

const mintPath = "/_issuer/token"

// MintRequest is the body of POST /_issuer/token: Token's fields plus the
// lifetime in seconds.
type MintRequest struct {
	Token
	TTLSeconds int64 `json:"ttlSeconds,omitempty"`
}

// MintResponse is its answer.
type MintResponse struct {
	Token     string `json:"token"`
	ExpiresAt int64  `json:"expiresAt"`
}

// routes serves, for any team slug:
//
//	GET  /<team>/.well-known/openid-configuration  discovery
//	GET  /<team>/.well-known/jwks                  the key set
//	POST /_issuer/token                             mint (admin bearer token; the
//	                                                token alone with Accept: text/plain)
func (i *Issuer) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{team}/.well-known/openid-configuration", i.serveDiscovery)
	mux.HandleFunc("GET /{team}/.well-known/jwks", i.serveJWKS)
	mux.HandleFunc("POST "+mintPath, i.serveMint)
	return mux
}

func (i *Issuer) serveDiscovery(w http.ResponseWriter, r *http.Request) {
	team := r.PathValue("team")
	if !slug.MatchString(team) {
		http.NotFound(w, r)
		return
	}
	iss := i.IssuerURL(team)
	// The API server requires `issuer` to equal the configured issuer URL
	// exactly, and fetches the keys from jwks_uri.
	writeJSON(w, http.StatusOK, map[string]any{
		"issuer":                                iss,
		"jwks_uri":                              iss + "/.well-known/jwks",
		"response_types_supported":              []string{"id_token"},
		"subject_types_supported":               []string{"public"},
		"id_token_signing_alg_values_supported": []string{"RS256"},
		"scopes_supported":                      []string{"openid"},
		"claims_supported":                      []string{"iss", "sub", "aud", "iat", "nbf", "exp", "jti", "owner", "owner_id", "project", "project_id", "environment"},
	})
}

func (i *Issuer) serveJWKS(w http.ResponseWriter, r *http.Request) {
	if !slug.MatchString(r.PathValue("team")) {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(i.JWKS())
}

func (i *Issuer) serveMint(w http.ResponseWriter, r *http.Request) {
	if !i.adminAuthorized(r) {
		writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "missing or wrong admin bearer token"})
		return
	}
	var req MintRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": fmt.Sprintf("body: %v", err)})
		return
	}
	if req.TTLSeconds < 0 {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "ttlSeconds: must not be negative"})
		return
	}
	req.TTL = time.Duration(req.TTLSeconds) * time.Second
	req.IssuedAt = i.now()
	tok, err := i.Mint(req.Token)
	if err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
		return
	}
	ttl := req.TTL
	if ttl == 0 {
		ttl = DefaultTTL
	}
	if r.Header.Get("Accept") == "text/plain" { // TOKEN=$(curl …) needs no jq
		w.Header().Set("Content-Type", "text/plain")
		w.Header().Set("Cache-Control", "no-store")
		_, _ = w.Write([]byte(tok))
		return
	}
	writeJSON(w, http.StatusOK, MintResponse{Token: tok, ExpiresAt: req.IssuedAt.Add(ttl).Unix()})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
