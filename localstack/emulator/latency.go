package emulator

// Latency profiles. The emulator answers as fast as the machine allows, which
// makes a benchmark against it measure the client and not what a user of
// Vercel waits for. A latency profile delays the operations Vercel is slow at
// (creating, resuming and forking sandboxes, snapshots, stops, and the first
// command of a session) by a random draw from a log-normal distribution per
// operation, so that a benchmark's time to first command is Vercel's, not
// loopback's. The default is no profile: tests stay fast.
//
// The delay runs before the operation does anything (like the injected
// latency of faults.go), on the emulator's clock: with a FakeClock a delayed
// request waits until the clock has been advanced past its delay.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/getsentry/sandbox-controller/internal/vercel"
)

// LatencyOp names an operation a latency profile can delay.
type LatencyOp string

// The operations a profile delays.
const (
	// LatencyCreate is a create from a runtime image (no snapshot source).
	LatencyCreate LatencyOp = "create"
	// LatencyCreateFromSnapshot is a create with source type snapshot.
	LatencyCreateFromSnapshot LatencyOp = "createFromSnapshot"
	// LatencyResume is a GET or PATCH ?resume=true that starts a new
	// session (a sandbox whose session runs is not delayed).
	LatencyResume LatencyOp = "resume"
	// LatencyFork is POST …/:name/fork.
	LatencyFork LatencyOp = "fork"
	// LatencySnapshot is POST …/sessions/:sid/snapshot.
	LatencySnapshot LatencyOp = "snapshot"
	// LatencyStop is POST …/sessions/:sid/stop.
	LatencyStop LatencyOp = "stop"
	// LatencyFirstCommand is the first runCommand of a session (while the
	// session has no command yet).
	LatencyFirstCommand LatencyOp = "firstCommand"
)

// LatencyOps lists every operation a profile can delay.
func LatencyOps() []LatencyOp {
	return []LatencyOp{LatencyCreate, LatencyCreateFromSnapshot, LatencyResume, LatencyFork,
		LatencySnapshot, LatencyStop, LatencyFirstCommand}
}

// LatencyDist is a log-normal distribution given by its median and its 95th
// percentile (P95 ≤ Median: always the median).
type LatencyDist struct {
	Median time.Duration `json:"median"`
	P95    time.Duration `json:"p95"`
}

// z95 is the standard normal's 95th percentile.
const z95 = 1.6448536269514722

// maxOverMedian caps a draw at this multiple of the median: a log-normal's
// tail is unbounded, and one draw of minutes would stall a benchmark without
// telling anything about Vercel.
const maxOverMedian = 10

// sigma is the log-normal's shape parameter.
func (d LatencyDist) sigma() float64 {
	if d.Median <= 0 || d.P95 <= d.Median {
		return 0
	}
	return math.Log(float64(d.P95)/float64(d.Median)) / z95
}

// draw turns one standard normal variate into a delay.
func (d LatencyDist) draw(z float64) time.Duration {
	if d.Median <= 0 {
		return 0
	}
	v := float64(d.Median) * math.Exp(d.sigma()*z)
	return time.Duration(math.Min(v, float64(d.Median)*maxOverMedian))
}

// LatencyProfile maps operations to their delay. The zero value delays
// nothing.
type LatencyProfile struct {
	// Name is how flags and reports call the profile ("vercel").
	Name string
	// Ops holds the distribution of each delayed operation; an operation
	// that is not listed is not delayed.
	Ops map[LatencyOp]LatencyDist
	// Seed makes the draws reproducible: each operation has its own random
	// stream seeded from it, so the n-th delay of an operation is the same
	// in every run whatever the other operations do. 0 = seeded from the
	// time.
	Seed uint64
}

// Empty reports whether the profile delays nothing.
func (p LatencyProfile) Empty() bool {
	for _, d := range p.Ops {
		if d.Median > 0 {
			return false
		}
	}
	return true
}

// VercelLatencyProfile returns delays taken from published measurements of
// Vercel Sandbox (retrieved 2026; see docs/dev/emulator-gaps.md):
//
//   - ComputeSDK's daily benchmark (computesdk.com/benchmarks, run of
//     2026-04-01, 100 sequential iterations): time from create to the first
//     command's answer, median 1.75 s, p95 1.93 s, p99 1.98 s.
//   - vercel-labs/sandbox-benchmarking (a reproduction by Vercel): creates
//     from a snapshot return in 1.2–2.06 s (≈1.5 s typical); a command on a
//     ready VM takes 207–293 ms from a laptop.
//   - Vercel's changelog "Sandbox creation now returns a ready sandbox":
//     create now waits for the snapshot restore (≈50 ms more at p50), so
//     the first command no longer absorbs the boot.
//
// So create ≈ 1.75 s − one command (≈0.2 s), a create from a snapshot is a
// little slower and wider, and the first command costs what a command does.
// Resume, fork, snapshot and stop have no published figures: their values
// are guesses (a resume and a fork restore a snapshot like a create from
// one; a snapshot copies the filesystem; a stop ends a VM), marked below.
func VercelLatencyProfile() LatencyProfile {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	return LatencyProfile{
		Name: "vercel",
		Ops: map[LatencyOp]LatencyDist{
			// ComputeSDK TTI 1.75 s / 1.93 s minus the first command below.
			LatencyCreate: {Median: ms(1550), P95: ms(1720)},
			// sandbox-benchmarking 1.2–2.06 s, + 50 ms restore (changelog).
			LatencyCreateFromSnapshot: {Median: ms(1600), P95: ms(2100)},
			// Guess: a resume restores the sandbox's last snapshot.
			LatencyResume: {Median: ms(1600), P95: ms(2100)},
			// Guess: a fork restores a snapshot of its source.
			LatencyFork: {Median: ms(1600), P95: ms(2100)},
			// Guess: nothing published.
			LatencySnapshot: {Median: ms(3000), P95: ms(6000)},
			// Guess: nothing published.
			LatencyStop: {Median: ms(500), P95: ms(1000)},
			// sandbox-benchmarking: a command on a ready VM, 207–293 ms.
			LatencyFirstCommand: {Median: ms(200), P95: ms(290)},
		},
	}
}

// LatencyProfileNames lists the names LatencyProfileByName knows.
func LatencyProfileNames() []string { return []string{"none", "vercel"} }

// LatencyProfileByName returns a built-in profile: "" or "none" (no delay),
// "vercel" (VercelLatencyProfile).
func LatencyProfileByName(name string) (LatencyProfile, error) {
	switch name {
	case "", "none":
		return LatencyProfile{}, nil
	case "vercel":
		return VercelLatencyProfile(), nil
	}
	return LatencyProfile{}, fmt.Errorf("latency profile %q: should be one of %s", name, strings.Join(LatencyProfileNames(), ", "))
}

// latencySampler draws the delays of one profile. Safe for concurrent use.
type latencySampler struct {
	mu      sync.Mutex
	profile LatencyProfile
	rngs    map[LatencyOp]*rand.Rand
}

func newLatencySampler(p LatencyProfile) *latencySampler {
	if p.Seed == 0 {
		p.Seed = uint64(time.Now().UnixNano())
	}
	s := &latencySampler{profile: p, rngs: map[LatencyOp]*rand.Rand{}}
	ops := make([]string, 0, len(p.Ops))
	for op := range p.Ops {
		ops = append(ops, string(op))
	}
	sort.Strings(ops)
	for _, op := range ops {
		h := fnv.New64a()
		_, _ = h.Write([]byte(op))
		s.rngs[LatencyOp(op)] = rand.New(rand.NewPCG(p.Seed, h.Sum64()))
	}
	return s
}

// next draws the delay of one request of op (0: not delayed).
func (s *latencySampler) next(op LatencyOp) time.Duration {
	if s == nil {
		return 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	d, ok := s.profile.Ops[op]
	if !ok {
		return 0
	}
	return d.draw(s.rngs[op].NormFloat64())
}

// SetLatencyProfile replaces the emulator's latency profile (the zero
// profile removes it). Requests already waiting keep their delay.
func (e *Emulator) SetLatencyProfile(p LatencyProfile) {
	if p.Empty() {
		e.latency.Store(nil)
		return
	}
	e.latency.Store(newLatencySampler(p))
}

// LatencyProfile returns the profile in force (zero when none).
func (e *Emulator) LatencyProfile() LatencyProfile {
	if s := e.latency.Load(); s != nil {
		return s.profile
	}
	return LatencyProfile{}
}

// profileDelay waits for the profile's delay of the request, if any. It
// reports false when the client gave up or the emulator closed meanwhile
// (nothing is to be answered then).
func (e *Emulator) profileDelay(rc *reqCtx) bool {
	s := e.latency.Load()
	if s == nil {
		return true
	}
	op, ok := e.latencyOpOf(rc)
	if !ok {
		return true
	}
	d := s.next(op)
	if d <= 0 {
		return true
	}
	return e.sleepOnClock(rc.r.Context(), d)
}

// LatencyWaiting is how many requests are waiting for their profile delay
// now (tests wait for a request to be parked before advancing a FakeClock).
func (e *Emulator) LatencyWaiting() int { return int(e.latencyWaiting.Load()) }

// latencyOpOf classifies a request for the profile.
func (e *Emulator) latencyOpOf(rc *reqCtx) (LatencyOp, bool) {
	switch rc.op {
	case "createSandbox":
		if createsFromSnapshot(rc) {
			return LatencyCreateFromSnapshot, true
		}
		return LatencyCreate, true
	case "forkSandbox":
		return LatencyFork, true
	case "createSnapshot":
		return LatencySnapshot, true
	case "stopSession":
		return LatencyStop, true
	case "getSandbox", "updateSandbox":
		return LatencyResume, truthy(rc.query("resume")) && e.needsResume(rc)
	case "runCommand":
		return LatencyFirstCommand, e.firstCommand(rc)
	}
	return "", false
}

// peekLimit bounds how much of a create's body is read to classify it;
// a body beyond it (a huge env) counts as a create from a runtime.
const peekLimit = 64 << 10

// createsFromSnapshot peeks at a create's body for source type snapshot and
// puts the body back for the handler.
func createsFromSnapshot(rc *reqCtx) bool {
	if rc.r.Body == nil {
		return false
	}
	head, err := io.ReadAll(io.LimitReader(rc.r.Body, peekLimit))
	rc.r.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(head), rc.r.Body), rc.r.Body}
	if err != nil {
		return false
	}
	var b struct {
		Source *struct {
			Type string `json:"type"`
		} `json:"source"`
	}
	if json.Unmarshal(head, &b) != nil || b.Source == nil {
		return false
	}
	return b.Source.Type == string(vercel.SourceSnapshot)
}

// needsResume reports whether a resume request finds the sandbox without a
// running or pending session (it will start one).
func (e *Emulator) needsResume(rc *reqCtx) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	sb, err := e.lookupSandboxLocked(rc)
	if err != nil {
		return false
	}
	cur := sb.current
	return cur == nil || (cur.status != vercel.SessionRunning && cur.status != vercel.SessionPending)
}

// firstCommand reports whether the request's session exists and has run no
// command yet. Concurrent first commands are all delayed, as they all wait
// for the same VM.
func (e *Emulator) firstCommand(rc *reqCtx) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	s, err := e.sessionLocked(rc)
	return err == nil && len(s.commands) == 0
}

// sleepOnClock waits d on the emulator's clock: a timer on the real clock;
// with a FakeClock, until the clock has been advanced d past now. It reports
// false when ctx ended or the emulator closed first.
func (e *Emulator) sleepOnClock(ctx context.Context, d time.Duration) bool {
	if e.fake != nil {
		return e.sleepOnFakeClock(ctx, d)
	}
	e.latencyWaiting.Add(1)
	defer e.latencyWaiting.Add(-1)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	case <-e.closing:
		return false
	}
}

func (e *Emulator) sleepOnFakeClock(ctx context.Context, d time.Duration) bool {
	// Registered before the deadline is read, so that an Advance right
	// after the read is not missed.
	moved := make(chan struct{}, 1)
	cancel := e.fake.onChange(func() {
		select {
		case moved <- struct{}{}:
		default:
		}
	})
	defer cancel()
	deadline := e.fake.Now().Add(d)
	// Counted once the deadline is fixed: a test that sees the request
	// waiting may advance the clock.
	e.latencyWaiting.Add(1)
	defer e.latencyWaiting.Add(-1)
	for e.fake.Now().Before(deadline) {
		select {
		case <-moved:
		case <-ctx.Done():
			return false
		case <-e.closing:
			return false
		}
	}
	return true
}
