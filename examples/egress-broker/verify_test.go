package main

import (
	"context"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"math/big"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// jwksServer serves a JWKS the test can change, and counts fetches.
type jwksServer struct {
	srv     *httptest.Server
	mu      sync.Mutex
	keys    map[string]*rsa.PublicKey
	fetches atomic.Int32
	stall   chan struct{} // when set, requests wait on it
}

func newJWKSServer(t *testing.T) *jwksServer {
	j := &jwksServer{keys: map[string]*rsa.PublicKey{}}
	j.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		j.fetches.Add(1)
		j.mu.Lock()
		stall := j.stall
		var set struct {
			Keys []map[string]string `json:"keys"`
		}
		for kid, k := range j.keys {
			set.Keys = append(set.Keys, map[string]string{"kty": "RSA", "alg": "RS256", "use": "sig", "kid": kid,
				"n": base64.RawURLEncoding.EncodeToString(k.N.Bytes()),
				"e": base64.RawURLEncoding.EncodeToString(big.NewInt(int64(k.E)).Bytes())})
		}
		j.mu.Unlock()
		if stall != nil {
			select {
			case <-stall:
			case <-r.Context().Done():
			}
			return
		}
		_ = json.NewEncoder(w).Encode(set)
	}))
	t.Cleanup(j.srv.Close)
	return j
}

func (j *jwksServer) set(keys map[string]*rsa.PublicKey) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.keys = keys
}

// TestJWKSCacheFollowsKeyRotation: keys are fetched once and cached; a
// token with an unknown kid refetches, but at most every 30 s (a flood of
// made-up kids cannot make the broker hammer the issuer), and the set is
// fetched anew after 10 minutes.
func TestJWKSCacheFollowsKeyRotation(t *testing.T) {
	j := newJWKSServer(t)
	iss := j.srv.URL // a loopback issuer, as the emulator in make dev
	keyA, keyB := newRSAKey(t), newRSAKey(t)
	j.set(map[string]*rsa.PublicKey{"a": &keyA.PublicKey})
	clk := &clock{}
	v := newVerifier([]string{iss}, nil, clk.now)
	aud := "https://broker.test/egress"
	token := func(key *rsa.PrivateKey, kid string) string {
		return signRS256(t, key, kid, map[string]any{"iss": iss, "aud": aud, "team_id": "t", "project_id": "p",
			"sandbox_id": "sbx_1", "exp": clk.now().Add(5 * time.Minute).Unix()})
	}
	verify := func(tok string) error {
		_, err := v.verify(context.Background(), tok, aud)
		return err
	}

	for range 3 {
		must(t, verify(token(keyA, "a")))
	}
	if n := j.fetches.Load(); n != 1 {
		t.Fatalf("%d fetches for three tokens, want 1", n)
	}
	// The issuer rotates to B. Right after a fetch, an unknown kid does
	// not refetch (cooldown); 30 s later it does.
	j.set(map[string]*rsa.PublicKey{"b": &keyB.PublicKey})
	if err := verify(token(keyB, "b")); err == nil {
		t.Errorf("a token with a kid unknown at the last fetch verified within the cooldown")
	}
	if n := j.fetches.Load(); n != 1 {
		t.Errorf("an unknown kid within the cooldown fetched (%d fetches)", n)
	}
	clk.advance(31 * time.Second)
	if err := verify(token(keyB, "b")); err != nil {
		t.Errorf("after the cooldown, the rotated key: %v", err)
	}
	if n := j.fetches.Load(); n != 2 {
		t.Errorf("%d fetches, want 2", n)
	}
	// Key A is gone from the cached set: its tokens fail (without a fetch,
	// the set being fresh), and the set is fetched anew at 10 minutes.
	if err := verify(token(keyA, "a")); err == nil {
		t.Errorf("a token of a key the issuer dropped verified")
	}
	clk.advance(10 * time.Minute)
	must(t, verify(token(keyB, "b")))
	if n := j.fetches.Load(); n != 3 {
		t.Errorf("%d fetches, want 3 (a's kid came within the cooldown; then the 10-minute refresh)", n)
	}
}

// TestJWKSFetchHasADeadline: an issuer that never answers costs a request
// five seconds (jose's timeout), not forever.
func TestJWKSFetchHasADeadline(t *testing.T) {
	j := newJWKSServer(t)
	j.stall = make(chan struct{})
	defer close(j.stall)
	v := newVerifier([]string{j.srv.URL}, nil, nil)
	tok := signRS256(t, newRSAKey(t), "a", map[string]any{"iss": j.srv.URL, "aud": "x", "team_id": "t", "project_id": "p",
		"sandbox_id": "s", "exp": time.Now().Add(time.Minute).Unix()})
	start := time.Now()
	_, err := v.verify(context.Background(), tok, "x")
	if err == nil || time.Since(start) > 8*time.Second || time.Since(start) < 4*time.Second {
		t.Errorf("verify against a stalled issuer: %v after %v, want an error after about 5 s", err, time.Since(start))
	}
}
