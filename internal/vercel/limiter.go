package vercel

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// newLimiter is the token bucket that paces a credential's requests. Vercel
// limits control-plane requests per team and minute
// (docs/dev/vercel-sandbox-api.md §8: 10 000/min on Pro), and a 429 costs far
// more than waiting a few milliseconds, so the client stays below the limit.
// It allows perMinute requests a minute with a burst of one second's worth (at
// least 1): a larger burst would let a minute's count exceed the server's
// window by the burst size.
func newLimiter(perMinute int) *rate.Limiter {
	r := perMinuteLimit(perMinute)
	return rate.NewLimiter(r, burstOf(r))
}

func perMinuteLimit(perMinute int) rate.Limit { return rate.Limit(float64(perMinute) / 60) }

func burstOf(r rate.Limit) int { return max(1, int(r)) }

// waitLimiter blocks until lim grants a token or ctx is done, and returns how
// long it waited. Unlike rate.Limiter.Wait it reports the delay (for
// OnLimiterWait), and it waits until ctx is done rather than failing at once
// when ctx's deadline falls before the token is due. A wait abandoned on ctx
// gives its token back, so a cancelled caller does not slow down the others.
func waitLimiter(ctx context.Context, lim *rate.Limiter) (time.Duration, error) {
	r := lim.Reserve() // never !OK: one token, burst ≥ 1
	d := r.Delay()
	if d <= 0 {
		return 0, nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return d, nil
	case <-ctx.Done():
		r.Cancel()
		return 0, context.Cause(ctx)
	}
}

// The registry shares one credential state among all Clients built for the
// same (base URL, token, team): the request limit and the 429 backoff belong
// to the credential, and an operator builds a Client per Secret it reads. Keys
// are hashes so that the token itself is never held in a package-level map.
var (
	registryMu sync.Mutex
	registry   = map[string]*credential{}
)

// credential is what every Client of one credential shares.
type credential struct {
	limiter  *rate.Limiter // nil until a Client asks for pacing; guarded by registryMu
	throttle throttle
}

func limiterKey(baseURL, token, teamID string) string {
	h := sha256.New()
	for _, s := range []string{baseURL, token, teamID} {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))
}

// sharedCredential returns the credential's shared state, creating it on
// first use.
func sharedCredential(key string) *credential {
	registryMu.Lock()
	defer registryMu.Unlock()
	return credentialLocked(key)
}

func credentialLocked(key string) *credential {
	cr, ok := registry[key]
	if !ok {
		cr = &credential{}
		registry[key] = cr
	}
	return cr
}

// sharedLimiter returns the credential's limiter, creating it on first use. A
// later Client asking for a lower rate lowers it for all: the shared limiter
// honours the most conservative setting.
func sharedLimiter(key string, perMinute int) *rate.Limiter {
	registryMu.Lock()
	defer registryMu.Unlock()
	cr := credentialLocked(key)
	if lim := cr.limiter; lim != nil {
		if r := perMinuteLimit(perMinute); r < lim.Limit() {
			lim.SetLimit(r)
			lim.SetBurst(burstOf(r))
		}
		return lim
	}
	cr.limiter = newLimiter(perMinute)
	return cr.limiter
}
