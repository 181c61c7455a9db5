package vercel

import (
	"net/http"
	"time"

	"github.com/getsentry/sandbox-controller/internal/httplimit"
)

// SetGateBackoff shortens the credential backoff schedule of c's 429 gates,
// so that tests in package vercel_test can watch several rounds quickly.
func SetGateBackoff(c *Client, base, cap time.Duration) {
	c.gateBackoff = throttleBackoff{base: base, cap: cap}
}

func isPriority(r *http.Request) bool { return httplimit.IsPriority(r.Context()) }
