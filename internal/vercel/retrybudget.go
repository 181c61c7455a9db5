package vercel

import "sync"

// retryBudget throttles retries the way gRPC does: every attempt that got no
// answer or a 5xx costs a token, every other answer earns a tenth of one
// back, and a retry is sent only while more than half the tokens remain. A
// passing blip is retried as before; in an outage the client stops
// multiplying its own load by 1+MaxRetries (and stops holding its caller in
// retry sleeps), so the callers' backoff alone paces it.
type retryBudget struct {
	mu     sync.Mutex
	tokens float64
}

const (
	retryTokens     = 10
	retryTokenRatio = 0.1
)

func newRetryBudget() *retryBudget { return &retryBudget{tokens: retryTokens} }

// record notes the outcome of one attempt.
func (b *retryBudget) record(failed bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if failed {
		b.tokens = max(0, b.tokens-1)
	} else {
		b.tokens = min(retryTokens, b.tokens+retryTokenRatio)
	}
}

// allow reports whether a failed attempt may be retried.
func (b *retryBudget) allow() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.tokens > retryTokens/2
}
