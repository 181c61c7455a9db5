package vercel

import (
	"math/rand/v2"
	"sync"
	"time"
)

// lane classifies a request for the 429 gates and the in-flight lanes.
type lane int

const (
	// laneDefault: every request not named below.
	laneDefault lane = iota
	// laneStart: the request may start a session (create, fork, a get or
	// update with resume). Vercel's concurrency limit answers these 429
	// without Retry-After (docs/dev/vercel-sandbox-api.md §7.2), and only
	// these: the limit is on running sessions, not on requests.
	laneStart
	// laneFree: the request frees capacity or keeps a session alive (delete
	// a sandbox, stop or extend a session). It is never held back by a 429
	// gate — it is what ends a concurrency storm — and it may use the
	// reserved in-flight slots (internal/httplimit.WithPriority).
	laneFree
)

// throttle is a credential's memory of Vercel's 429s, shared by every
// Client of the credential, so that one caller's 429 slows them all instead
// of each caller finding the limit on its own:
//
//   - all holds back every request but laneFree. A 429 with Retry-After
//     closes it for that long; a 429 without one on a request that is not a
//     start closes it for an exponential backoff.
//   - starts holds back laneStart only. A 429 without Retry-After on a start
//     (the concurrency limit) closes it for an exponential backoff: 1 s, 2 s,
//     4 s, … up to the cap. Reads, deletes and commands go on meanwhile.
//
// When a backoff ends, one request probes the gate while the others keep
// waiting; its answer opens the gate (anything but 429) or closes it for the
// next, doubled, backoff. A successful delete or stop opens starts at once,
// since it freed a session: the next start need not wait out the backoff.
type throttle struct {
	mu     sync.Mutex
	all    gate
	starts gate
}

type gate struct {
	until    time.Time // closed before this
	failures int       // consecutive backoff rounds (429s without Retry-After)
	epoch    int       // bumped whenever the gate is closed or reopened
	probing  bool      // a request is testing the gate
}

// ticket is what admit hands a request, for settle.
type ticket struct {
	lane   lane
	epochs [2]int // of all and starts when admitted
	probes [2]bool
}

// throttleBackoff is the backoff schedule of the gates.
type throttleBackoff struct {
	base, cap time.Duration
}

func (b throttleBackoff) step(failures int) time.Duration {
	if failures <= 0 {
		return 0
	}
	d := b.base << min(failures-1, 20)
	if d > b.cap || d <= 0 {
		d = b.cap
	}
	return d
}

// jitter adds up to half of d, so that callers told to come back after d do
// not all come back at once.
func jitter(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return d + rand.N(d/2+1)
}

func (t *throttle) gates(l lane) [2]*gate {
	switch l {
	case laneFree:
		return [2]*gate{}
	case laneStart:
		return [2]*gate{&t.all, &t.starts}
	}
	return [2]*gate{&t.all, nil}
}

// admit decides whether a request of lane l may be sent at now. It returns
// the ticket to settle with once the request is answered (or failed), or how
// long the request must wait.
func (t *throttle) admit(l lane, now time.Time, b throttleBackoff) (ticket, time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	tk := ticket{lane: l}
	gs := t.gates(l)
	var wait time.Duration
	for _, g := range gs {
		if g == nil {
			continue
		}
		switch {
		case now.Before(g.until):
			wait = max(wait, g.until.Sub(now))
		case g.failures > 0 && g.probing:
			// Someone is testing the gate; if it fails, the gate closes
			// for the next step.
			wait = max(wait, b.step(g.failures+1))
		}
	}
	if wait > 0 {
		return ticket{}, wait
	}
	tk.epochs = [2]int{t.all.epoch, t.starts.epoch}
	for i, g := range gs {
		if g == nil {
			continue
		}
		if g.failures > 0 {
			g.probing = true
			tk.probes[i] = true
		}
	}
	return tk, 0
}

// settle records the outcome of an admitted request: status 0 when no
// answer arrived, else the HTTP status and Retry-After. releases says the
// request, if successful, ended a session. It returns the wait the request's
// own caller should observe after a 429 (before jitter).
func (t *throttle) settle(tk ticket, status int, retryAfter time.Duration, releases bool, now time.Time, b throttleBackoff) time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	gs := t.gates(tk.lane)
	for i, g := range gs {
		if g != nil && tk.probes[i] {
			g.probing = false
		}
	}
	switch {
	case status == 0:
		return 0
	case status == 429 && retryAfter > 0:
		t.all.closeUntil(now.Add(retryAfter))
		return retryAfter
	case status == 429:
		i := 0
		if tk.lane == laneStart {
			i = 1
		}
		g := [2]*gate{&t.all, &t.starts}[i]
		// Only the first 429 of a round counts: requests admitted together
		// before the gate closed all answer 429, and that is one round.
		if tk.epochs[i] == g.epoch {
			g.failures++
			g.closeUntil(now.Add(b.step(g.failures)))
		}
		return max(b.step(g.failures), g.until.Sub(now))
	}
	// Any answer but 429 means the request limit let it through.
	t.all.open()
	if status >= 200 && status < 300 {
		if tk.lane == laneStart {
			t.starts.open()
		}
		if releases && (t.starts.failures > 0 || now.Before(t.starts.until)) {
			// A session ended: let one start probe at once.
			t.starts.until = now
			t.starts.epoch++
		}
	}
	return 0
}

func (g *gate) closeUntil(t time.Time) {
	if t.After(g.until) {
		g.until = t
	}
	g.epoch++
}

func (g *gate) open() {
	if g.failures > 0 {
		g.failures = 0
		g.epoch++
	}
}
