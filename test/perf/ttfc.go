package perf

// The time-to-first-command benchmark (issue 32): how long a new conversation
// waits from "it needs a sandbox" until its first command's output, under
// the emulator's latency profile (localstack/emulator/latency.go), for each
// way of getting a sandbox:
//
//   - sdk: Vercel's official SDK calling Vercel directly (ttfc_sdk.go);
//   - operator: a Sandbox created cold from a SandboxSnapshot, waited for
//     until Ready, then the first command through the Vercel API
//     (ttfc_operator.go);
//   - pool (to come with the SandboxPool kind): a claim from a pool. It is
//     one more entry of ttfcArms: a function that prepares the arm from the
//     shared ttfcSource and returns the per-conversation call.
//
// Each arm is measured at steady rates of new conversations (conversations
// start on a fixed schedule, whatever the earlier ones are doing) and in one
// burst. The time of a conversation is taken from its scheduled start, so
// any queueing in the client or the operator counts.

import (
	"context"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/getsentry/sandbox-controller/localstack/emulator"
)

// TTFC arm names.
const (
	TTFCArmSDK      = "sdk"
	TTFCArmOperator = "operator"
)

// TTFCConfig says what the time-to-first-command phase measures.
type TTFCConfig struct {
	// Arms in the order they run at each schedule (default sdk, operator).
	Arms []string
	// Rates are the steady rates of new conversations per second (default
	// 1 and 10); Conversations is how many start at each rate (default 30).
	Rates         []float64
	Conversations int
	// Burst conversations start at once (default 100; negative skips it).
	Burst int
	// Profile is the emulator's latency profile for the phase, by name
	// ("vercel" by default, "none" for a smoke run); Seed seeds its draws.
	Profile string
	Seed    uint64
	// Timeout bounds one conversation (default 2m).
	Timeout time.Duration
	// PoolSize is the pool arm's number of members (default 20).
	PoolSize int32
}

func (c *TTFCConfig) defaults() {
	if len(c.Arms) == 0 {
		c.Arms = []string{TTFCArmSDK, TTFCArmOperator}
	}
	if len(c.Rates) == 0 {
		c.Rates = []float64{1, 10}
	}
	if c.Conversations <= 0 {
		c.Conversations = 30
	}
	if c.Burst == 0 {
		c.Burst = 100
	}
	if c.Profile == "" {
		c.Profile = "vercel"
	}
	if c.Seed == 0 {
		c.Seed = 1
	}
	if c.Timeout <= 0 {
		c.Timeout = 2 * time.Minute
	}
	if c.PoolSize <= 0 {
		c.PoolSize = 20
	}
}

// ttfcSource is what every arm starts a conversation's sandbox from: one
// SandboxSnapshot (for the operator) and the Vercel snapshot it made (for
// the SDK), the same filesystem.
type ttfcSource struct {
	namespace    string
	snapshotName string // a Ready SandboxSnapshot in namespace
	snapshotID   string // its status.snapshotID
}

// ttfcArm is one way of getting a conversation its sandbox: conversation
// runs one conversation (create or claim, then the first command and its
// output) and returns once the output is in; close releases what prepare
// started.
type ttfcArm struct {
	conversation func(ctx context.Context, id string) error
	close        func()
	// sessions, when set, holds each conversation's time from its scheduled
	// start (scheduledStart of its context) until its sandbox was ready for
	// the first command: the operator's part of the time, without the
	// command's own.
	sessions *durations
}

// durations collects durations from concurrent conversations.
type durations struct {
	mu sync.Mutex
	d  []time.Duration
}

func (d *durations) add(v time.Duration) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.d = append(d.d, v)
}

func (d *durations) sorted() []time.Duration {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := slices.Clone(d.d)
	slices.Sort(out)
	return out
}

type scheduledKey struct{}

// scheduledStart is when the conversation of ctx was scheduled to start
// (runSchedule); the zero time outside one.
func scheduledStart(ctx context.Context) time.Time {
	t, _ := ctx.Value(scheduledKey{}).(time.Time)
	return t
}

// ttfcArms prepares each arm. A new arm (the pool's claim) is one more
// entry.
var ttfcArms = map[string]func(h *harness, ctx context.Context, src ttfcSource) (*ttfcArm, error){
	TTFCArmSDK:      (*harness).prepareSDKArm,
	TTFCArmOperator: (*harness).prepareOperatorArm,
}

// TTFCResult is the phase's report.
type TTFCResult struct {
	Profile    string                          `json:"profile"`
	Seed       uint64                          `json:"seed"`
	ProfileOps map[string]emulator.LatencyDist `json:"profileOps,omitempty"`
	SetupMs    float64                         `json:"setupMs"`
	Rows       []*TTFCRow                      `json:"rows"`
	// RatioP50 is each arm's p50 over the sdk arm's, per schedule.
	RatioP50 map[string]map[string]float64 `json:"ratioP50ToSDK,omitempty"`
}

// TTFCRow is one arm at one schedule.
type TTFCRow struct {
	Arm           string   `json:"arm"`
	Schedule      string   `json:"schedule"` // "1/s", "10/s", "burst 100"
	Conversations int      `json:"conversations"`
	Failed        int      `json:"failed"`
	Errors        []string `json:"errors,omitempty"` // the first few
	P50Ms         float64  `json:"p50Ms"`
	P95Ms         float64  `json:"p95Ms"`
	P99Ms         float64  `json:"p99Ms"`
	MaxMs         float64  `json:"maxMs"`
	// WallMs is from the first scheduled start to the last answer.
	WallMs float64 `json:"wallMs"`
	// SessionP50Ms and SessionP95Ms are the time until the sandbox was
	// ready for the first command (arms that wait on a Sandbox's status).
	SessionP50Ms float64 `json:"sessionP50Ms,omitempty"`
	SessionP95Ms float64 `json:"sessionP95Ms,omitempty"`
	// Pool is the pool arm's claims during the row (the manager's metrics).
	Pool *TTFCPoolStats `json:"pool,omitempty"`
}

// ttfcSchedule is when each conversation of one run starts.
type ttfcSchedule struct {
	name string          // "1/s", "burst 100"
	key  string          // in object names: "r1", "b100"
	at   []time.Duration // offset of each conversation's start
}

func ttfcSchedules(c TTFCConfig) []ttfcSchedule {
	var out []ttfcSchedule
	for _, r := range c.Rates {
		s := ttfcSchedule{name: fmt.Sprintf("%g/s", r), key: "r" + strings.ReplaceAll(fmt.Sprintf("%g", r), ".", "p")}
		for i := 0; i < c.Conversations; i++ {
			s.at = append(s.at, time.Duration(float64(i)/r*float64(time.Second)))
		}
		out = append(out, s)
	}
	if c.Burst > 0 {
		out = append(out, ttfcSchedule{name: fmt.Sprintf("burst %d", c.Burst), key: fmt.Sprintf("b%d", c.Burst), at: make([]time.Duration, c.Burst)})
	}
	return out
}

// runTTFC runs the phase: the shared source (untimed, without the profile),
// then every schedule for every arm under the profile.
func (h *harness) runTTFC(ctx context.Context, c TTFCConfig) (*TTFCResult, error) {
	c.defaults()
	h.ttfcPoolSize = c.PoolSize
	prof, err := emulator.LatencyProfileByName(c.Profile)
	if err != nil {
		return nil, err
	}
	prof.Seed = c.Seed
	res := &TTFCResult{Profile: c.Profile, Seed: c.Seed, RatioP50: map[string]map[string]float64{}}
	if len(prof.Ops) > 0 {
		res.ProfileOps = map[string]emulator.LatencyDist{}
		for op, d := range prof.Ops {
			res.ProfileOps[string(op)] = d
		}
	}
	setup := time.Now()
	src, err := h.ttfcSource(ctx)
	if err != nil {
		return res, fmt.Errorf("ttfc source: %w", err)
	}
	res.SetupMs = ms(time.Since(setup))
	h.logf("time to first command: source snapshot %s (%s), profile %s, seed %d", src.snapshotName, src.snapshotID, c.Profile, c.Seed)

	h.emu.SetLatencyProfile(prof)
	defer h.emu.SetLatencyProfile(emulator.LatencyProfile{})
	for _, sched := range ttfcSchedules(c) {
		p50 := map[string]float64{}
		for _, name := range c.Arms {
			row, err := h.runTTFCArm(ctx, c, name, src, sched)
			if err != nil {
				return res, err
			}
			res.Rows = append(res.Rows, row)
			p50[name] = row.P50Ms
			h.logf("  ttfc %-9s %-9s p50 %7.3fs p95 %7.3fs p99 %7.3fs failed %d", sched.name, name, row.P50Ms/1000, row.P95Ms/1000, row.P99Ms/1000, row.Failed)
		}
		if base, ok := p50[TTFCArmSDK]; ok && base > 0 {
			res.RatioP50[sched.name] = map[string]float64{}
			for arm, v := range p50 {
				if arm != TTFCArmSDK {
					res.RatioP50[sched.name][arm] = v / base
				}
			}
		}
	}
	return res, nil
}

// runTTFCArm prepares one arm, warms it with one untimed conversation, and
// runs one schedule.
func (h *harness) runTTFCArm(ctx context.Context, c TTFCConfig, name string, src ttfcSource, sched ttfcSchedule) (*TTFCRow, error) {
	prepare, ok := ttfcArms[name]
	if !ok {
		return nil, fmt.Errorf("ttfc arm %q: should be one of %s", name, strings.Join(TTFCArmNames(), ", "))
	}
	arm, err := prepare(h, ctx, src)
	if err != nil {
		return nil, fmt.Errorf("ttfc arm %s: %w", name, err)
	}
	defer arm.close()
	// The first conversation of a process pays its connections and lazy
	// initialisation; no user of a long-running app does.
	wctx, cancel := context.WithTimeout(ctx, c.Timeout)
	err = arm.conversation(wctx, sched.key+"-warm")
	cancel()
	if err != nil {
		return nil, fmt.Errorf("ttfc arm %s: warm-up: %w", name, err)
	}
	before := h.scrapeManagerMetrics(ctx)
	times, errs, wall := runSchedule(ctx, sched, c.Timeout, arm.conversation)
	row := &TTFCRow{Arm: name, Schedule: sched.name, Conversations: len(sched.at), Failed: len(errs), WallMs: ms(wall)}
	row.Errors = firstN(errs, 3)
	slices.Sort(times)
	row.P50Ms, row.P95Ms, row.P99Ms = ms(pct(times, 50)), ms(pct(times, 95)), ms(pct(times, 99))
	if len(times) > 0 {
		row.MaxMs = ms(times[len(times)-1])
	}
	if arm.sessions != nil {
		d := arm.sessions.sorted()
		row.SessionP50Ms, row.SessionP95Ms = ms(pct(d, 50)), ms(pct(d, 95))
	}
	if name == TTFCArmPool {
		row.Pool = poolStats(src.namespace, before, h.scrapeManagerMetrics(ctx))
	}
	return row, nil
}

// runSchedule starts one conversation at each offset of sched and returns
// the times of those that succeeded (from their scheduled start), the
// errors of the others, and the wall time of the whole run.
func runSchedule(ctx context.Context, sched ttfcSchedule, timeout time.Duration, conversation func(context.Context, string) error) ([]time.Duration, []string, time.Duration) {
	var (
		mu    sync.Mutex
		times []time.Duration
		errs  []string
		wg    sync.WaitGroup
	)
	start := time.Now()
	for i, at := range sched.at {
		if d := time.Until(start.Add(at)); d > 0 {
			select {
			case <-time.After(d):
			case <-ctx.Done():
			}
		}
		wg.Add(1)
		go func(id string, scheduled time.Time) {
			defer wg.Done()
			cctx, cancel := context.WithTimeout(context.WithValue(ctx, scheduledKey{}, scheduled), timeout)
			defer cancel()
			err := conversation(cctx, id)
			took := time.Since(scheduled)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, fmt.Sprintf("%s: %v", id, err))
				return
			}
			times = append(times, took)
		}(fmt.Sprintf("%s-c%04d", sched.key, i), start.Add(at))
	}
	wg.Wait()
	sort.Strings(errs)
	return times, errs, time.Since(start)
}

// TTFCArmNames lists the arms the phase knows.
func TTFCArmNames() []string {
	names := make([]string, 0, len(ttfcArms))
	for n := range ttfcArms {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// markdownTTFC renders the phase.
func markdownTTFC(w io.Writer, r *TTFCResult) {
	fmt.Fprintf(w, "\nTime to first command (latency profile %s, seed %d): from a conversation's scheduled start to its first command's output; steady rates start conversations on a fixed schedule, the burst all at once.\n\n", r.Profile, r.Seed)
	fmt.Fprintln(w, "| schedule | arm | conversations | p50 | p95 | p99 | max | failed | p50 / sdk | session ready p50 / p95 |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|")
	for _, row := range r.Rows {
		ratio := "—"
		if v, ok := r.RatioP50[row.Schedule][row.Arm]; ok {
			ratio = fmt.Sprintf("%.3f", v)
		}
		session := "—"
		if row.SessionP50Ms > 0 {
			session = secs(row.SessionP50Ms) + " / " + secs(row.SessionP95Ms)
		}
		fmt.Fprintf(w, "| %s | %s | %d | %s | %s | %s | %s | %d | %s | %s |\n", row.Schedule, row.Arm, row.Conversations,
			secs(row.P50Ms), secs(row.P95Ms), secs(row.P99Ms), secs(row.MaxMs), row.Failed, ratio, session)
	}
	for _, row := range r.Rows {
		if p := row.Pool; p != nil {
			fmt.Fprintf(w, "* %s pool: %d claims took a member, %d were created cold %v; a claim took %.0f ms on average (creation to hand-over), its member had waited %.1f s ready\n",
				row.Schedule, p.Hits, p.Cold(), p.Misses, p.ClaimMeanMs, p.IdleMeanSeconds)
		}
	}
	for _, row := range r.Rows {
		for _, e := range row.Errors {
			fmt.Fprintf(w, "* %s %s: %s\n", row.Schedule, row.Arm, tail(e, 300))
		}
	}
}
