package vercel

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"sync"
	"time"
)

// bucket is a token bucket. Vercel limits control-plane requests per team and
// minute (§8: 10 000/min on Pro), and a 429 costs far more than waiting a few
// milliseconds, so the client paces itself below the limit.
//
// It is hand-written (rather than golang.org/x/time/rate) to keep the package
// on the standard library; it needs only reserve-and-wait.
type bucket struct {
	mu     sync.Mutex
	rate   float64 // tokens per second
	burst  float64
	tokens float64
	last   time.Time
	now    func() time.Time
}

// newBucket allows perMinute requests a minute with a burst of one second's
// worth (at least 1): a larger burst would let a minute's count exceed the
// server's window by the burst size.
func newBucket(perMinute int, now func() time.Time) *bucket {
	rate := float64(perMinute) / 60
	burst := max(1, rate)
	return &bucket{rate: rate, burst: burst, tokens: burst, last: now(), now: now}
}

// reserve takes one token and returns how long the caller must wait before
// using it. Tokens may go negative: later callers queue behind earlier ones.
func (b *bucket) reserve() time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	if el := now.Sub(b.last); el > 0 {
		b.tokens = min(b.burst, b.tokens+el.Seconds()*b.rate)
		b.last = now
	}
	b.tokens--
	if b.tokens >= 0 {
		return 0
	}
	return time.Duration(-b.tokens / b.rate * float64(time.Second))
}

// cancel gives back a token whose wait was abandoned, so a cancelled caller
// does not slow down the others.
func (b *bucket) cancel() {
	b.mu.Lock()
	b.tokens = min(b.burst, b.tokens+1)
	b.mu.Unlock()
}

// setRate lowers the rate when a second Client for the same credential asks
// for less: the shared bucket honours the most conservative setting.
func (b *bucket) setRate(perMinute int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if r := float64(perMinute) / 60; r < b.rate {
		b.rate = r
		b.burst = max(1, r)
		b.tokens = min(b.tokens, b.burst)
	}
}

// wait blocks until a token is available or ctx is done, and returns how long
// it waited.
func (b *bucket) wait(ctx context.Context) (time.Duration, error) {
	d := b.reserve()
	if d <= 0 {
		return 0, nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return d, nil
	case <-ctx.Done():
		b.cancel()
		return 0, context.Cause(ctx)
	}
}

// The registry shares one bucket among all Clients built for the same
// (base URL, token, team): the limit belongs to the credential, and an
// operator builds a Client per Secret it reads. Keys are hashes so that the
// token itself is never held in a package-level map.
var (
	registryMu sync.Mutex
	registry   = map[string]*bucket{}
)

func limiterKey(baseURL, token, teamID string) string {
	h := sha256.New()
	for _, s := range []string{baseURL, token, teamID} {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))
}

func sharedBucket(key string, perMinute int) *bucket {
	registryMu.Lock()
	defer registryMu.Unlock()
	if b, ok := registry[key]; ok {
		b.setRate(perMinute)
		return b
	}
	b := newBucket(perMinute, time.Now)
	registry[key] = b
	return b
}
