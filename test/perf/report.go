package perf

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"
)

// Report is everything one run measured; WriteJSON and Markdown render it.
type Report struct {
	Started  time.Time    `json:"started"`
	Finished time.Time    `json:"finished"`
	Config   ReportConfig `json:"config"`
	Host     HostInfo     `json:"host"`

	Runs   []*GridResult `json:"runs"`
	Kinds  *KindsResult  `json:"kinds,omitempty"`
	Idle   *IdleResult   `json:"idle,omitempty"`
	Outage *OutageResult `json:"outage,omitempty"`
	TTFC   *TTFCResult   `json:"ttfc,omitempty"`

	// ManagerMetrics are selected series from the in-process manager's
	// metrics endpoint at the end of the run.
	ManagerMetrics map[string]float64 `json:"managerMetrics,omitempty"`
}

// ReportConfig is Config in printable units.
type ReportConfig struct {
	Sizes             []int    `json:"sizes"`
	Latencies         []string `json:"latencies"`
	Rounds            int      `json:"rounds"`
	Concurrency       int      `json:"maxConcurrentReconciles"`
	VercelInFlight    int      `json:"vercelMaxInFlight"`
	RequestsPerMinute int      `json:"vercelRequestsPerMinute"`
	PollInterval      string   `json:"pollInterval"`
	BackoffCap        string   `json:"backoffCap"`
	CreateConcurrency int      `json:"createConcurrency"`
	IdleN             int      `json:"idleN"`
	IdleWindow        string   `json:"idleWindow"`
	Outage            string   `json:"outage"`
	ManagerBinary     string   `json:"managerBinary,omitempty"`
	Snapshots         int      `json:"snapshots"`
	ForkReplicas      int      `json:"forkReplicas"`
}

func reportConfig(c Config) ReportConfig {
	rc := ReportConfig{
		Sizes: c.Sizes, Rounds: c.Rounds, Concurrency: c.Concurrency, VercelInFlight: c.VercelInFlight, RequestsPerMinute: c.RequestsPerMinute,
		PollInterval: c.PollInterval.String(), BackoffCap: c.BackoffCap.String(), CreateConcurrency: c.CreateConcurrency,
		IdleN: c.IdleN, IdleWindow: c.IdleWindow.String(), Outage: c.Outage.String(), ManagerBinary: c.ManagerBinary,
		Snapshots: c.Snapshots, ForkReplicas: c.ForkReplicas,
	}
	for _, l := range c.Latencies {
		rc.Latencies = append(rc.Latencies, l.String())
	}
	return rc
}

// HostInfo describes where the figures were taken.
type HostInfo struct {
	CPUs      int    `json:"cpus"`
	GoVersion string `json:"goVersion"`
	LoadAvg   string `json:"loadAvgAtStart,omitempty"`
}

func hostInfo() HostInfo {
	h := HostInfo{CPUs: runtime.NumCPU(), GoVersion: runtime.Version()}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		h.LoadAvg = strings.TrimSpace(string(b))
	}
	return h
}

// GridResult is one (N, latency) point.
type GridResult struct {
	N         int                   `json:"n"`
	LatencyMs float64               `json:"latencyMs"`
	Arms      map[string]*ArmResult `json:"arms"`
	// Ratios of the operator to direct (a/b) and to floor (a/c).
	RatioABP50   float64 `json:"ratioABP50"`
	RatioABDrain float64 `json:"ratioABDrain"`
	RatioACP50   float64 `json:"ratioACP50"`
	RatioACDrain float64 `json:"ratioACDrain"`
}

// ArmResult pools an arm's rounds: percentiles over every object of every
// round, drain as the median round.
type ArmResult struct {
	Rounds  int       `json:"rounds"`
	Objects int       `json:"objects"`
	Failed  int       `json:"failed"`
	P50Ms   float64   `json:"p50Ms"`
	P95Ms   float64   `json:"p95Ms"`
	P99Ms   float64   `json:"p99Ms"`
	MaxMs   float64   `json:"maxMs"`
	DrainMs float64   `json:"drainMs"`
	Drains  []float64 `json:"drainsMs"`
	// Per object, averaged over rounds (operator and floor: the manager's
	// API-server writes; all arms: requests the emulator received).
	SandboxWritesPerObject  float64 `json:"sandboxWritesPerObject"`
	EventWritesPerObject    float64 `json:"eventWritesPerObject"`
	VercelRequestsPerObject float64 `json:"vercelRequestsPerObject"`
	// VercelCreatesPerObject counts createSandbox requests alone.
	VercelCreatesPerObject float64 `json:"vercelCreatesPerObject"`
	// MeanWriteMs is the mean round trip of the manager's Sandbox writes.
	MeanWriteMs float64 `json:"meanSandboxWriteMs,omitempty"`
	// CPUMsPerObject is CPU time per object, by process (harness: this
	// process, i.e. manager, emulator and client; kube-apiserver; etcd).
	CPUMsPerObject map[string]float64 `json:"cpuMsPerObject"`
	// CreatesTimeline is, for the last round, the number of Vercel creates
	// received every 250 ms from the arm's start.
	CreatesTimeline []int64 `json:"createsTimeline,omitempty"`
	// VercelInFlightToP50 is the mean number of Vercel requests in flight
	// (at the emulator) from the arm's start until its median object was
	// Ready, averaged over rounds: how full the arm kept the pipe that
	// --vercel-max-in-flight bounds.
	VercelInFlightToP50 float64 `json:"vercelInFlightToP50"`
	// Sharded arm: per shard, the objects it called Vercel for (last
	// round), and over all rounds the objects called for by two shards or
	// by the wrong one (must be 0).
	ShardObjects    []int `json:"shardObjects,omitempty"`
	ShardViolations int   `json:"shardViolations"`
}

func summarizeGrid(n int, latency time.Duration, runs map[string][]*armRun) *GridResult {
	g := &GridResult{N: n, LatencyMs: ms(latency), Arms: map[string]*ArmResult{}}
	for arm, rs := range runs {
		a := &ArmResult{Rounds: len(rs)}
		var all, drains []time.Duration
		var sw, ew, vr, wn, cr int64
		var wt time.Duration
		a.CPUMsPerObject = map[string]float64{}
		for _, r := range rs {
			wt, wn = wt+r.writeTime, wn+r.writeN
			for k, v := range r.cpu {
				a.CPUMsPerObject[k] += v * 1000 / float64(n*len(rs))
			}
			all = append(all, r.latencies...)
			drains = append(drains, r.drain)
			a.Failed += r.failed
			sw, ew, vr = sw+r.sandboxWrites, ew+r.eventWrites, vr+r.vercelRequests
			a.Drains = append(a.Drains, ms(r.drain))
			a.CreatesTimeline = r.creates
			if len(r.creates) > 0 {
				cr += r.creates[len(r.creates)-1]
			}
			a.VercelInFlightToP50 += r.inFlightToP50 / float64(len(rs))
			a.ShardObjects = r.shardObjects
			a.ShardViolations += r.shardViolations
		}
		sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
		sort.Slice(drains, func(i, j int) bool { return drains[i] < drains[j] })
		a.Objects = len(all)
		a.P50Ms, a.P95Ms, a.P99Ms = ms(pct(all, 50)), ms(pct(all, 95)), ms(pct(all, 99))
		if len(all) > 0 {
			a.MaxMs = ms(all[len(all)-1])
		}
		a.DrainMs = ms(median(drains))
		total := float64(n * len(rs))
		a.SandboxWritesPerObject = float64(sw) / total
		a.EventWritesPerObject = float64(ew) / total
		a.VercelRequestsPerObject = float64(vr) / total
		a.VercelCreatesPerObject = float64(cr) / total
		if wn > 0 {
			a.MeanWriteMs = ms(wt) / float64(wn)
		}
		g.Arms[arm] = a
	}
	op, d, f := g.Arms[ArmOperator], g.Arms[ArmDirect], g.Arms[ArmFloor]
	if op != nil && d != nil {
		g.RatioABP50, g.RatioABDrain = ratio(op.P50Ms, d.P50Ms), ratio(op.DrainMs, d.DrainMs)
	}
	if op != nil && f != nil {
		g.RatioACP50, g.RatioACDrain = ratio(op.P50Ms, f.P50Ms), ratio(op.DrainMs, f.DrainMs)
	}
	return g
}

// IdleResult is the steady state with IdleN Sandboxes running.
type IdleResult struct {
	N       int    `json:"n"`
	Manager string `json:"manager"` // "child process" or "in-process"

	// The no-op resync: a manager start that finds every object up to date.
	ResyncSandboxWritesPerObject  float64 `json:"resyncSandboxWritesPerObject"`
	ResyncEventWritesPerObject    float64 `json:"resyncEventWritesPerObject"`
	ResyncVercelRequestsPerObject float64 `json:"resyncVercelRequestsPerObject"`
	ResyncSeconds                 float64 `json:"resyncSeconds"`

	// Over the idle window.
	WindowSeconds               float64          `json:"windowSeconds"`
	PollIntervalSeconds         float64          `json:"pollIntervalSeconds"`
	VercelRequests              int64            `json:"vercelRequests"`
	VercelRequestsByEndpoint    map[string]int64 `json:"vercelRequestsByEndpoint"`
	VercelRequestsPerObjectPoll float64          `json:"vercelRequestsPerObjectPerPollInterval"`
	VercelRequestsPerObjectHour float64          `json:"vercelRequestsPerObjectPerHour"`
	SandboxWritesInWindow       float64          `json:"sandboxWritesInWindow"`
	RSSMiB                      float64          `json:"rssMiB"`
	RSSMaxMiB                   float64          `json:"rssMaxMiB"`
	HeapInUseMiB                float64          `json:"heapInUseMiB,omitempty"`
	GoTotalMiB                  float64          `json:"goRuntimeTotalMiB,omitempty"`
	CPUSeconds                  float64          `json:"cpuSeconds"`
	CPUPercentOfCore            float64          `json:"cpuPercentOfCore"`
	Note                        string           `json:"note,omitempty"`
}

// OutageResult is the recovery from Vercel answering 503 to everything.
type OutageResult struct {
	N              int     `json:"n"`
	OutageSeconds  float64 `json:"outageSeconds"`
	BackoffCapSecs float64 `json:"backoffCapSeconds"`

	RequestsDuringOutage int64 `json:"requestsDuringOutage"`
	// BoundRequests is the most the per-object exponential backoff (1 s
	// doubling, capped) allows over the outage: one request per attempt,
	// plus the few retries the client's retry budget spends first.
	BoundRequests int64 `json:"boundRequests"`
	// Over the last BackoffCap of the outage, when every object is at the
	// cap: measured requests per second and the bound.
	TailRate      float64   `json:"tailRequestsPerSecond"`
	TailRateBound float64   `json:"tailRequestsPerSecondBound"`
	RatePerSecond []float64 `json:"requestsPerSecondTimeline,omitempty"`

	RecoverySeconds float64 `json:"recoverySeconds"` // until every object is Synced with the change applied
	Recovered       int     `json:"recovered"`
	RecoveryP50Secs float64 `json:"recoveryP50Seconds"`
}

// WriteJSON writes the report to dir/bench-<time>.json and returns the path.
func (r *Report) WriteJSON(dir string) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	p := filepath.Join(dir, "bench-"+r.Started.Format("20060102T150405Z")+".json")
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return "", err
	}
	return p, os.WriteFile(p, append(b, '\n'), 0o644)
}

// Markdown prints the report's tables.
func (r *Report) Markdown(w io.Writer) {
	fmt.Fprintf(w, "Host: %d CPUs, %s, load at start %s. Manager: --max-concurrent-reconciles=%d --vercel-max-in-flight=%d --vercel-requests-per-minute=%d --poll-interval=%s --backoff-cap=%s; %d rounds per point. The direct arm uses the same Vercel client settings and as many callers as reconciles.\n\n",
		r.Host.CPUs, r.Host.GoVersion, r.Host.LoadAvg, r.Config.Concurrency, r.Config.VercelInFlight, r.Config.RequestsPerMinute, r.Config.PollInterval, r.Config.BackoffCap, r.Config.Rounds)
	if len(r.Runs) > 0 {
		r.markdownGrid(w)
	}
	if r.Kinds != nil {
		markdownKinds(w, r.Kinds)
	}
	if r.TTFC != nil {
		markdownTTFC(w, r.TTFC)
	}
	if i := r.Idle; i != nil {
		fmt.Fprintln(w)
		fmt.Fprintf(w, "Idle, %d Sandboxes Ready, manager %s:\n\n", i.N, i.Manager)
		fmt.Fprintln(w, "| measure | value |")
		fmt.Fprintln(w, "|---|---|")
		fmt.Fprintf(w, "| no-op resync: k8s writes/obj (events/obj) | %.3f (%.3f) |\n", i.ResyncSandboxWritesPerObject, i.ResyncEventWritesPerObject)
		fmt.Fprintf(w, "| no-op resync: Vercel req/obj, duration | %.2f, %.1fs |\n", i.ResyncVercelRequestsPerObject, i.ResyncSeconds)
		fmt.Fprintf(w, "| steady state: Vercel req/obj per poll interval (%gs) | %.3f (%.1f/obj/hour) |\n", i.PollIntervalSeconds, i.VercelRequestsPerObjectPoll, i.VercelRequestsPerObjectHour)
		fmt.Fprintf(w, "| steady state: k8s writes in %.0fs window | %.0f |\n", i.WindowSeconds, i.SandboxWritesInWindow)
		fmt.Fprintf(w, "| RSS end / max | %.1f MiB / %.1f MiB |\n", i.RSSMiB, i.RSSMaxMiB)
		if i.HeapInUseMiB > 0 {
			fmt.Fprintf(w, "| Go heap in use / Go runtime total | %.1f MiB / %.1f MiB |\n", i.HeapInUseMiB, i.GoTotalMiB)
		}
		fmt.Fprintf(w, "| CPU over window | %.2fs (%.2f%% of a core) |\n", i.CPUSeconds, i.CPUPercentOfCore)
		if i.Note != "" {
			fmt.Fprintf(w, "\n%s\n", i.Note)
		}
	}
	if o := r.Outage; o != nil {
		fmt.Fprintln(w)
		fmt.Fprintf(w, "Outage: %d Sandboxes, each with a pending spec change, Vercel 503 for %.0fs (backoff cap %.0fs):\n\n", o.N, o.OutageSeconds, o.BackoffCapSecs)
		fmt.Fprintln(w, "| measure | value |")
		fmt.Fprintln(w, "|---|---|")
		fmt.Fprintf(w, "| requests during outage / backoff-implied bound | %d / %d |\n", o.RequestsDuringOutage, o.BoundRequests)
		fmt.Fprintf(w, "| request rate over the last backoff cap / bound | %.2f/s / %.2f/s |\n", o.TailRate, o.TailRateBound)
		fmt.Fprintf(w, "| recovered (Synced, change applied) | %d of %d |\n", o.Recovered, o.N)
		fmt.Fprintf(w, "| recovery p50 / all | %.1fs / %.1fs |\n", o.RecoveryP50Secs, o.RecoverySeconds)
	}
}

func pct(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted))*p/100+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// median of sorted values; the mean of the middle two for an even count.
func median(sorted []time.Duration) time.Duration {
	n := len(sorted)
	switch {
	case n == 0:
		return 0
	case n%2 == 1:
		return sorted[n/2]
	}
	return (sorted[n/2-1] + sorted[n/2]) / 2
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func secs(msv float64) string { return fmt.Sprintf("%.3fs", msv/1000) }

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// markdownGrid prints the grid's tables.
func (r *Report) markdownGrid(w io.Writer) {
	fmt.Fprintln(w, "Time to Ready is measured from the start of the burst (all N requested at once); drain is the median round.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| N | latency | arm | p50 | p95 | p99 | drain | failed | k8s writes/obj | events/obj | Vercel req/obj |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|")
	for _, g := range r.Runs {
		for _, arm := range []string{ArmOperator, ArmDirect, ArmFloor, ArmSharded} {
			a := g.Arms[arm]
			if a == nil {
				continue
			}
			fmt.Fprintf(w, "| %d | %gms | %s | %s | %s | %s | %s | %d | %.2f | %.2f | %.2f |\n", g.N, g.LatencyMs, arm,
				secs(a.P50Ms), secs(a.P95Ms), secs(a.P99Ms), secs(a.DrainMs), a.Failed,
				a.SandboxWritesPerObject, a.EventWritesPerObject, a.VercelRequestsPerObject)
		}
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "CPU per object (ms) by process, the manager's mean Sandbox write round trip, and the mean number of Vercel requests in flight until the median object was Ready (of --vercel-max-in-flight=%d):\n", r.Config.VercelInFlight)
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| N | latency | arm | harness (manager+emulator+client) | kube-apiserver | etcd | mean write | Vercel in flight to p50 |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|")
	for _, g := range r.Runs {
		for _, arm := range []string{ArmOperator, ArmDirect, ArmFloor, ArmSharded} {
			if a := g.Arms[arm]; a != nil {
				fmt.Fprintf(w, "| %d | %gms | %s | %.2f | %.2f | %.2f | %.1fms | %.2f |\n", g.N, g.LatencyMs, arm,
					a.CPUMsPerObject["harness"], a.CPUMsPerObject["kube-apiserver"], a.CPUMsPerObject["etcd"], a.MeanWriteMs, a.VercelInFlightToP50)
			}
		}
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| N | latency | a/b p50 | a/b drain | a/c p50 | a/c drain |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|")
	for _, g := range r.Runs {
		fmt.Fprintf(w, "| %d | %gms | %.3f | %.3f | %.2f | %.2f |\n", g.N, g.LatencyMs, g.RatioABP50, g.RatioABDrain, g.RatioACP50, g.RatioACDrain)
	}
	for _, g := range r.Runs {
		if a := g.Arms[ArmSharded]; a != nil {
			fmt.Fprintf(w, "\nSharded arm, N=%d, %gms: objects per shard (last round) %v, objects called for by two shards or the wrong one %d; sharded/operator drain %.3f (2 managers on the same cores: overhead, not speed-up)\n",
				g.N, g.LatencyMs, a.ShardObjects, a.ShardViolations, ratio(a.DrainMs, g.Arms[ArmOperator].DrainMs))
		}
	}
}
