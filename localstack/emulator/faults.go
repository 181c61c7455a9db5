package emulator

import (
	"bytes"
	"io"
	"net/http"
	"sync"
	"time"
)

// FailMode says how a CommitThenFail fault answers after the change was applied.
type FailMode int

const (
	// FailWith500 answers 500 internal_server_error instead of the real answer.
	FailWith500 FailMode = iota
	// FailDropConnection closes the connection without any answer.
	FailDropConnection
)

func (m FailMode) String() string {
	if m == FailDropConnection {
		return "drop"
	}
	return "500"
}

// Faults injects failures into the emulator's answers. Op names are the
// operation names of RequestCount ("createSandbox", …); op "" or "*" means
// every endpoint. When both a specific and a wildcard fault are armed, the
// specific one is consumed first. All methods are safe for concurrent use.
type Faults struct {
	mu          sync.Mutex
	latency     map[string]time.Duration
	rateLimit   map[string]*rateFault
	failNext    map[string]*failFault
	commitFail  map[string]*commitFault
	holes       map[string]chan struct{}
	maxRunning  int // 0 = plan value
	maxRunningS bool
}

type rateFault struct {
	n          int
	retryAfter time.Duration
}

type failFault struct {
	n      int
	status int
}

type commitFault struct {
	n    int
	mode FailMode
}

func newFaults() *Faults {
	f := &Faults{}
	f.Reset()
	return f
}

func normOp(op string) string {
	if op == "" {
		return "*"
	}
	return op
}

// SetLatency delays every answer of op by d (0 removes the delay).
func (f *Faults) SetLatency(op string, d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if d <= 0 {
		delete(f.latency, normOp(op))
		return
	}
	f.latency[normOp(op)] = d
}

// RateLimit answers the next n requests of op with 429 rate_limited and a
// Retry-After header of retryAfter in seconds (rounded up).
func (f *Faults) RateLimit(op string, n int, retryAfter time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if n <= 0 {
		delete(f.rateLimit, normOp(op))
		return
	}
	f.rateLimit[normOp(op)] = &rateFault{n: n, retryAfter: retryAfter}
}

// FailNext answers the next n requests of op with status (a 5xx gets the
// internal_server_error envelope) without applying anything.
func (f *Faults) FailNext(op string, n int, status int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if n <= 0 {
		delete(f.failNext, normOp(op))
		return
	}
	if status == 0 {
		status = 500
	}
	f.failNext[normOp(op)] = &failFault{n: n, status: status}
}

// CommitThenFail lets the next n requests of op apply their change and then
// either answers 500 (FailWith500) or drops the connection (FailDropConnection)
// instead of the real answer — the "committed but the response was lost" case.
func (f *Faults) CommitThenFail(op string, n int, mode FailMode) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if n <= 0 {
		delete(f.commitFail, normOp(op))
		return
	}
	f.commitFail[normOp(op)] = &commitFault{n: n, mode: mode}
}

// BlackHole makes every request of op hang without an answer from now on,
// until LiftBlackHole(op) or Reset, or until the client gives up (closes the
// connection or cancels the request): a peer that accepted the connection and
// went silent. A request still waiting when the hole is lifted is then served
// as usual, like a very late answer. Requests that arrive after the lift are
// not held.
func (f *Faults) BlackHole(op string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.holes[normOp(op)]; !ok {
		f.holes[normOp(op)] = make(chan struct{})
	}
}

// LiftBlackHole ends BlackHole(op): the requests it holds go on.
func (f *Faults) LiftBlackHole(op string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if ch, ok := f.holes[normOp(op)]; ok {
		close(ch)
		delete(f.holes, normOp(op))
	}
}

// holdRequest holds a request in a black hole until the hole is lifted
// (true: serve it) or the client gives up (false: drop it). The body is read
// first: net/http notices a client closing its connection only once the
// request body has been read.
func holdRequest(r *http.Request, hole <-chan struct{}) bool {
	if r.Body != nil {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			return false
		}
		r.Body = io.NopCloser(bytes.NewReader(b))
	}
	select {
	case <-hole:
		return true
	case <-r.Context().Done():
		return false
	}
}

// DropResponses lets the next n requests of op apply their change and then
// closes the connection without an answer: CommitThenFail with
// FailDropConnection.
func (f *Faults) DropResponses(op string, n int) { f.CommitThenFail(op, n, FailDropConnection) }

// SetMaxRunning overrides the plan's limit of concurrently running sessions
// per team: creates, resumes and forks beyond n answer 429 (0 = none may
// start). A negative n restores the plan's value.
func (f *Faults) SetMaxRunning(n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.maxRunning = max(n, 0)
	f.maxRunningS = n >= 0
}

// Reset removes every fault and the max-running override, and lifts every
// black hole.
func (f *Faults) Reset() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, ch := range f.holes {
		close(ch)
	}
	f.holes = map[string]chan struct{}{}
	f.latency = map[string]time.Duration{}
	f.rateLimit = map[string]*rateFault{}
	f.failNext = map[string]*failFault{}
	f.commitFail = map[string]*commitFault{}
	f.maxRunning = 0
	f.maxRunningS = false
}

func (f *Faults) maxRunningOverride() (int, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.maxRunning, f.maxRunningS
}

// armed is what a request drew from the fault table.
type armed struct {
	hole       <-chan struct{} // closed when the black hole is lifted
	latency    time.Duration
	rateLimit  *rateFault
	failStatus int
	commit     *commitFault
}

// draw consumes the faults that apply to one request of op.
func (f *Faults) draw(op string) armed {
	f.mu.Lock()
	defer f.mu.Unlock()
	var a armed
	if ch, ok := f.holes[op]; ok {
		a.hole = ch
	} else if ch, ok := f.holes["*"]; ok {
		a.hole = ch
	}
	if d, ok := f.latency[op]; ok {
		a.latency = d
	} else if d, ok := f.latency["*"]; ok {
		a.latency = d
	}
	for _, k := range []string{op, "*"} {
		if rf := f.rateLimit[k]; rf != nil {
			c := *rf
			a.rateLimit = &c
			if rf.n--; rf.n <= 0 {
				delete(f.rateLimit, k)
			}
			return a
		}
	}
	for _, k := range []string{op, "*"} {
		if ff := f.failNext[k]; ff != nil {
			a.failStatus = ff.status
			if ff.n--; ff.n <= 0 {
				delete(f.failNext, k)
			}
			return a
		}
	}
	for _, k := range []string{op, "*"} {
		if cf := f.commitFail[k]; cf != nil {
			c := *cf
			a.commit = &c
			if cf.n--; cf.n <= 0 {
				delete(f.commitFail, k)
			}
			return a
		}
	}
	return a
}
