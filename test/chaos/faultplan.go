package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"time"

	"github.com/getsentry/sandbox-controller/internal/vercel"
	"github.com/getsentry/sandbox-controller/localstack/emulator"
)

// Vercel operations (emulator RequestCount names) faults are aimed at.
var (
	mutatingOps = []string{"createSandbox", "updateSandbox", "deleteSandbox", "stopSession", "extendTimeout",
		"updateNetworkPolicy", "runCommand", "createSnapshot", "deleteSnapshot"}
	readOps = []string{"getSandbox", "getSnapshot", "listSnapshots", "getCommand", "getSession"}
)

// faultKind names one kind of injected fault in the report.
const (
	faultRetryAfter  = "429 with Retry-After"
	faultNoRetry     = "429 without Retry-After"
	fault5xx         = "5xx"
	faultCommit500   = "commit then 500"
	faultDropped     = "dropped response (committed)"
	faultLatency     = "latency spike"
	faultMaxRunning  = "concurrency limit (maxRunning)"
	faultBlackHoleOp = "black hole (one operation)"
	faultBlackHole   = "black hole (every operation)"
)

// faultPlan injects a seeded random sequence of faults into the emulator.
type faultPlan struct {
	h      *harness
	faults *emulator.Faults
	rng    *rand.Rand

	mu      sync.Mutex
	windows []window // faults lifted at a time
	counts  map[string]int
	limited bool // a maxRunning window is open
	holeAll bool // the every-operation black hole is open
}

type window struct {
	end  time.Time
	lift func()
}

func newFaultPlan(h *harness, rng *rand.Rand) *faultPlan {
	return &faultPlan{h: h, faults: h.stack.Emulator.Faults(), rng: rng, counts: map[string]int{}}
}

// run injects an episode every FaultEvery on average, and the black hole on
// every operation once, BlackHoleAt into the run, until ctx ends; then it
// lifts every fault.
func (f *faultPlan) run(ctx context.Context, start time.Time) {
	defer f.liftAll()
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	next := time.Now().Add(f.jitter(f.h.cfg.FaultEvery))
	holeAt := start.Add(f.h.cfg.BlackHoleAt)
	holeDone := f.h.cfg.BlackHole <= 0
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			f.liftExpired(now)
			if !holeDone && !now.Before(holeAt) {
				holeDone = true
				f.blackHoleAll(f.h.cfg.BlackHole)
			}
			if !now.Before(next) {
				f.episode()
				next = now.Add(f.jitter(f.h.cfg.FaultEvery))
			}
		}
	}
}

// jitter is a random delay between half and one and a half times d.
func (f *faultPlan) jitter(d time.Duration) time.Duration {
	return d/2 + time.Duration(f.rng.Int64N(int64(d)+1))
}

func (f *faultPlan) op(ops []string) string {
	if f.rng.IntN(10) < 3 {
		return "*"
	}
	return ops[f.rng.IntN(len(ops))]
}

func (f *faultPlan) anyOp() []string {
	return append(append([]string(nil), mutatingOps...), readOps...)
}

// episode injects one fault chosen at random.
func (f *faultPlan) episode() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.holeAll {
		return
	}
	switch k := f.rng.IntN(100); {
	case k < 15:
		op, n, ra := f.op(f.anyOp()), 3+f.rng.IntN(28), time.Duration(1+f.rng.IntN(5))*time.Second
		f.faults.RateLimit(op, n, ra)
		f.record(faultRetryAfter, "%s ×%d, Retry-After %s", op, n, ra)
	case k < 30:
		op, n := f.op(f.anyOp()), 3+f.rng.IntN(28)
		f.faults.FailNext(op, n, 429)
		f.record(faultNoRetry, "%s ×%d", op, n)
	case k < 45:
		op, n, st := f.op(f.anyOp()), 1+f.rng.IntN(10), []int{500, 502, 503, 504}[f.rng.IntN(4)]
		f.faults.FailNext(op, n, st)
		f.record(fault5xx, "%s ×%d, %d", op, n, st)
	case k < 55:
		op, n := mutatingOps[f.rng.IntN(len(mutatingOps))], 1+f.rng.IntN(3)
		f.faults.CommitThenFail(op, n, emulator.FailWith500)
		f.record(faultCommit500, "%s ×%d", op, n)
	case k < 67:
		ops := f.anyOp()
		op, n := ops[f.rng.IntN(len(ops))], 1+f.rng.IntN(3)
		f.faults.DropResponses(op, n)
		f.record(faultDropped, "%s ×%d", op, n)
	case k < 80:
		op := f.op(f.anyOp())
		d := time.Duration(300+f.rng.IntN(3700)) * time.Millisecond
		span := time.Duration(5+f.rng.IntN(16)) * time.Second
		f.faults.SetLatency(op, d)
		f.open(span, func() { f.faults.SetLatency(op, 0) })
		f.record(faultLatency, "%s +%s for %s", op, d, span)
	case k < 90:
		if f.limited {
			return
		}
		running := f.runningSessions()
		limit := 0
		if running > 1 {
			limit = f.rng.IntN(running/2 + 1)
		}
		span := time.Duration(10+f.rng.IntN(21)) * time.Second
		f.faults.SetMaxRunning(limit)
		f.limited = true
		f.open(span, func() { f.faults.SetMaxRunning(-1); f.limited = false })
		f.record(faultMaxRunning, "%d running sessions allowed (%d running) for %s", limit, running, span)
	default:
		ops := f.anyOp()
		op := ops[f.rng.IntN(len(ops))]
		span := time.Duration(5+f.rng.IntN(16)) * time.Second
		f.faults.BlackHole(op)
		f.open(span, func() { f.faults.LiftBlackHole(op) })
		f.record(faultBlackHoleOp, "%s for %s", op, span)
	}
}

// blackHoleAll makes every Vercel request hang for d.
func (f *faultPlan) blackHoleAll(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.faults.BlackHole("*")
	f.holeAll = true
	f.open(d, func() { f.faults.LiftBlackHole("*"); f.holeAll = false })
	f.record(faultBlackHole, "every operation for %s", d)
}

func (f *faultPlan) runningSessions() int {
	n := 0
	for _, s := range f.h.stack.Emulator.Sessions() {
		if s.Status == vercel.SessionRunning || s.Status == vercel.SessionPending {
			n++
		}
	}
	return n
}

// open registers a windowed fault; f.mu is held.
func (f *faultPlan) open(d time.Duration, lift func()) {
	f.windows = append(f.windows, window{end: time.Now().Add(d), lift: lift})
}

func (f *faultPlan) record(kind, format string, args ...any) {
	f.counts[kind]++
	f.h.logf("fault: %s: %s", kind, fmt.Sprintf(format, args...))
}

func (f *faultPlan) liftExpired(now time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	keep := f.windows[:0]
	for _, w := range f.windows {
		if now.Before(w.end) {
			keep = append(keep, w)
			continue
		}
		w.lift()
	}
	f.windows = keep
}

// liftAll ends every fault, armed or open.
func (f *faultPlan) liftAll() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, w := range f.windows {
		w.lift()
	}
	f.windows = nil
	f.faults.Reset()
	f.h.logf("fault: all faults lifted")
}

// summary lists the injected faults by kind.
func (f *faultPlan) summary() []countRow {
	f.mu.Lock()
	defer f.mu.Unlock()
	return sortedCounts(f.counts)
}

type countRow struct {
	name string
	n    int
}

func sortedCounts(m map[string]int) []countRow {
	rows := make([]countRow, 0, len(m))
	for k, v := range m {
		rows = append(rows, countRow{k, v})
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].name < rows[j].name })
	return rows
}
