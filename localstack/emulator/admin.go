package emulator

import (
	"net/http"
	"time"

	"github.com/getsentry/sandbox-controller/internal/vercel"
)

// AdminState is the answer of GET /_emulator/state.
type AdminState struct {
	Now       int64             `json:"now"`
	ExecMode  string            `json:"execMode"`
	Plan      string            `json:"plan"`
	Sandboxes []vercel.Sandbox  `json:"sandboxes"`
	Sessions  []vercel.Session  `json:"sessions"`
	Snapshots []vercel.Snapshot `json:"snapshots"`
}

// AdminFaults is the body of POST /_emulator/faults: every listed fault is
// armed (in addition to those already armed).
type AdminFaults struct {
	Latency []struct {
		Op string `json:"op"`
		Ms int64  `json:"ms"`
	} `json:"latency,omitempty"`
	RateLimit []struct {
		Op                string `json:"op"`
		N                 int    `json:"n"`
		RetryAfterSeconds int64  `json:"retryAfterSeconds"`
	} `json:"rateLimit,omitempty"`
	FailNext []struct {
		Op     string `json:"op"`
		N      int    `json:"n"`
		Status int    `json:"status"`
	} `json:"failNext,omitempty"`
	CommitThenFail []struct {
		Op   string `json:"op"`
		N    int    `json:"n"`
		Mode string `json:"mode"` // "500" (default) | "drop"
	} `json:"commitThenFail,omitempty"`
	MaxRunning *int `json:"maxRunning,omitempty"`
}

// serveAdmin serves the /_emulator endpoints (same bearer token; OIDC tokens
// are not accepted):
//
//	GET    /_emulator/state           live sandboxes, sessions, snapshots
//	GET    /_emulator/counters        per-operation request counters
//	POST   /_emulator/counters/reset  zero them
//	POST   /_emulator/faults          arm faults (AdminFaults)
//	DELETE /_emulator/faults          remove every fault
//	POST   /_emulator/clock/advance   {"ms": n} (FakeClock only)
func (e *Emulator) serveAdmin(w http.ResponseWriter, r *http.Request) {
	if tok := bearer(r); tok == "" {
		writeError(w, &apiError{status: 401, code: "unauthorized", message: "Missing authentication token."})
		return
	} else if !e.tokenMatches(tok) {
		writeError(w, &apiError{status: 403, code: "forbidden", message: "Not authorized."})
		return
	}
	rc := &reqCtx{e: e, w: w, r: r}
	switch r.Method + " " + r.URL.Path {
	case "GET /_emulator/state":
		st := AdminState{
			Now: e.nowMs(), ExecMode: e.ExecMode(), Plan: e.plan.Name,
			Sandboxes: e.LiveSandboxes(), Sessions: e.Sessions(), Snapshots: e.Snapshots(),
		}
		writeJSON(w, http.StatusOK, st)
	case "GET /_emulator/counters":
		writeJSON(w, http.StatusOK, e.Counts())
	case "POST /_emulator/counters/reset":
		e.ResetCounts()
		writeJSON(w, http.StatusOK, e.Counts())
	case "POST /_emulator/faults":
		var b AdminFaults
		if err := rc.decode(&b, false); err != nil {
			writeError(w, err)
			return
		}
		for _, c := range b.CommitThenFail {
			if c.Mode != "" && c.Mode != "500" && c.Mode != "drop" {
				writeError(w, invalid("commitThenFail.mode", "should be \"500\" or \"drop\""))
				return
			}
		}
		for _, l := range b.Latency {
			e.faults.SetLatency(l.Op, time.Duration(l.Ms)*time.Millisecond)
		}
		for _, l := range b.RateLimit {
			e.faults.RateLimit(l.Op, l.N, time.Duration(l.RetryAfterSeconds)*time.Second)
		}
		for _, f := range b.FailNext {
			e.faults.FailNext(f.Op, f.N, f.Status)
		}
		for _, c := range b.CommitThenFail {
			mode := FailWith500
			if c.Mode == "drop" {
				mode = FailDropConnection
			}
			e.faults.CommitThenFail(c.Op, c.N, mode)
		}
		if b.MaxRunning != nil {
			e.faults.SetMaxRunning(*b.MaxRunning)
		}
		writeJSON(w, http.StatusOK, struct{}{})
	case "DELETE /_emulator/faults":
		e.faults.Reset()
		writeJSON(w, http.StatusOK, struct{}{})
	case "POST /_emulator/clock/advance":
		if e.fake == nil {
			writeError(w, &apiError{status: 409, code: "conflict", message: "The emulator runs on the real clock; start it with a fake clock to advance time."})
			return
		}
		var b struct {
			Ms int64 `json:"ms"`
		}
		if err := rc.decode(&b, false); err != nil {
			writeError(w, err)
			return
		}
		if b.Ms < 0 {
			writeError(w, invalid("ms", "should be >= 0"))
			return
		}
		e.fake.Advance(time.Duration(b.Ms) * time.Millisecond)
		writeJSON(w, http.StatusOK, map[string]int64{"now": e.nowMs()})
	default:
		writeError(w, notFound("Unknown emulator admin endpoint %s %s.", r.Method, r.URL.Path))
	}
}
