// Command bench runs the side-by-side benchmark of test/perf (`make bench`):
// it prints a markdown table and writes the full report as JSON under
// bin/bench/.
//
//	go run ./test/perf/cmd/bench -n 100,1000 -latency 0,50ms -outage 5m -manager-bin bin/bench/manager
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/go-logr/logr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/getsentry/sandbox-controller/test/perf"
)

func main() {
	d := perf.DefaultConfig()
	var (
		sizes, latencies string
		out, cpuProfile  string
		memProfile       string
		verbose          bool
		cfg              = d
	)
	flag.StringVar(&sizes, "n", "100,1000", "Comma-separated numbers of Sandboxes per arm.")
	flag.StringVar(&latencies, "latency", "0,50ms", "Comma-separated emulated Vercel latencies per request.")
	flag.IntVar(&cfg.Rounds, "rounds", d.Rounds, "Interleaved rounds of the three arms per (N, latency).")
	flag.IntVar(&cfg.Concurrency, "max-concurrent-reconciles", d.Concurrency, "The manager's --max-concurrent-reconciles; also the number of the direct arm's callers.")
	flag.IntVar(&cfg.VercelInFlight, "vercel-max-in-flight", d.VercelInFlight, "The manager's (and direct arm's) bound on Vercel requests in flight (negative: none).")
	flag.IntVar(&cfg.RequestsPerMinute, "vercel-requests-per-minute", d.RequestsPerMinute, "The manager's (and direct arm's) Vercel request budget.")
	flag.DurationVar(&cfg.PollInterval, "poll-interval", d.PollInterval, "The manager's --poll-interval.")
	flag.DurationVar(&cfg.BackoffCap, "backoff-cap", d.BackoffCap, "The manager's --backoff-cap.")
	flag.IntVar(&cfg.CreateConcurrency, "create-concurrency", d.CreateConcurrency, "Sandbox creates the harness keeps in flight.")
	flag.DurationVar(&cfg.ReadyTimeout, "ready-timeout", d.ReadyTimeout, "Longest wait for one arm's objects.")
	flag.IntVar(&cfg.IdleN, "idle-n", 0, "Sandboxes kept running for the idle and outage phases (0: the largest -n).")
	flag.DurationVar(&cfg.IdleWindow, "idle", d.IdleWindow, "How long to observe the steady state (0 skips the idle phase).")
	flag.DurationVar(&cfg.Outage, "outage", d.Outage, "How long Vercel answers 503 to everything (0 skips the outage phase).")
	flag.DurationVar(&cfg.RecoveryTimeout, "recovery-timeout", d.RecoveryTimeout, "Longest wait for recovery after the outage.")
	flag.IntVar(&cfg.Snapshots, "snapshots", d.Snapshots, "SandboxSnapshots, each capturing one Ready Sandbox, measured after the grid at its largest latency (0 skips).")
	flag.IntVar(&cfg.ForkReplicas, "fork-replicas", d.ForkReplicas, "Children of one SandboxFork from one SandboxSnapshot, measured after the grid at its largest latency (0 skips; at most 100).")
	flag.StringVar(&cfg.ManagerBinary, "manager-bin", "", "A built cmd/manager to run as a child process for the idle and outage phases (its own RSS and CPU); empty: the in-process manager.")
	flag.StringVar(&out, "out", "bin/bench", "Directory for the JSON report.")
	flag.StringVar(&cpuProfile, "cpuprofile", "", "Write a CPU profile of the whole harness process (manager included) to this file.")
	flag.StringVar(&cfg.APIServerProfile, "apiserver-profile", "", "Write a 10 s CPU profile of kube-apiserver, taken during the first operator arm at the largest -n, to this file.")
	flag.StringVar(&memProfile, "memprofile", "", "Write a heap profile at the end of the run to this file.")
	flag.IntVar(&cfg.Shards, "shards", d.Shards, "Managers the sharded arm splits the operator between (--shards); 0 or 1 leaves the arm out.")
	ttfcOn, ttfc := true, perf.TTFCConfig{}
	var ttfcRates, ttfcArms string
	flag.BoolVar(&ttfcOn, "ttfc", true, "Run the time-to-first-command phase (after the kinds): new conversations get a sandbox and run a first command, per arm, under the emulator's latency profile.")
	flag.BoolVar(&cfg.TTFCOnly, "ttfc-only", false, "Run only the time-to-first-command phase (no grid, kinds, idle or outage).")
	flag.StringVar(&ttfcArms, "ttfc-arms", "sdk,operator", "Comma-separated arms of the time-to-first-command phase: "+strings.Join(perf.TTFCArmNames(), ", ")+".")
	flag.StringVar(&ttfcRates, "ttfc-rates", "1,10", "Comma-separated steady rates of new conversations per second.")
	flag.IntVar(&ttfc.Conversations, "ttfc-conversations", 30, "Conversations per steady rate.")
	flag.IntVar(&ttfc.Burst, "ttfc-burst", 100, "Conversations started at once in the burst (negative skips it).")
	poolSize := flag.Int("ttfc-pool-size", 20, "Members of the pool arm's SandboxPool (the burst claims more than it holds: the rest are created cold).")
	flag.StringVar(&ttfc.Profile, "ttfc-profile", "vercel", "The emulator's latency profile during the phase: none or vercel.")
	flag.Uint64Var(&ttfc.Seed, "ttfc-seed", 1, "Seed of the latency profile's draws.")
	var large bool
	flag.BoolVar(&large, "large", false, "The 10,000 grid: -n 100,1000,10000 (unless -n is given) and a -ready-timeout of at least 20m.")
	flag.BoolVar(&verbose, "v", false, "Show the manager's logs.")
	flag.Parse()
	if large {
		nSet := false
		flag.Visit(func(f *flag.Flag) { nSet = nSet || f.Name == "n" })
		if !nSet {
			sizes = "100,1000,10000"
		}
		cfg.ReadyTimeout = max(cfg.ReadyTimeout, 20*time.Minute)
	}

	if cfg.Snapshots < 0 || cfg.ForkReplicas < 0 || cfg.ForkReplicas > 100 {
		fail(fmt.Errorf("-snapshots must be ≥ 0 and -fork-replicas between 0 and 100 (a SandboxFork's limit)"))
	}
	var err error
	if ttfcOn || cfg.TTFCOnly {
		if ttfc.Rates, err = parseRates(ttfcRates); err != nil {
			fail(err)
		}
		ttfc.Arms = strings.Split(ttfcArms, ",")
		ttfc.PoolSize = int32(*poolSize)
		cfg.TTFC = &ttfc
	}
	if cfg.Sizes, err = parseInts(sizes); err != nil {
		fail(err)
	}
	if cfg.Latencies, err = parseDurations(latencies); err != nil {
		fail(err)
	}
	cfg.Log = os.Stderr
	if verbose {
		ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr)))
	} else {
		ctrl.SetLogger(logr.Discard())
	}
	if cpuProfile != "" {
		f, err := os.Create(cpuProfile)
		if err != nil {
			fail(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			fail(err)
		}
		defer pprof.StopCPUProfile()
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	start := time.Now()
	rep, err := perf.Run(ctx, cfg)
	if memProfile != "" {
		if f, ferr := os.Create(memProfile); ferr == nil {
			_ = pprof.WriteHeapProfile(f)
			f.Close()
		}
	}
	if rep != nil {
		fmt.Printf("\n## sandbox-controller bench (%s, %s)\n\n", start.UTC().Format(time.RFC3339), time.Since(start).Round(time.Second))
		fmt.Printf("Command: %s\n\n", strings.Join(os.Args, " "))
		rep.Markdown(os.Stdout)
		if p, jerr := rep.WriteJSON(out); jerr == nil {
			fmt.Printf("\nJSON: %s\n", p)
		} else {
			fmt.Fprintln(os.Stderr, "write JSON:", jerr)
		}
	}
	if err != nil {
		pprof.StopCPUProfile()
		fail(err)
	}
}

func parseInts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("-n: %q is not a positive number", f)
		}
		out = append(out, n)
	}
	return out, nil
}

func parseRates(s string) ([]float64, error) {
	var out []float64
	for _, f := range strings.Split(s, ",") {
		r, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil || r <= 0 {
			return nil, fmt.Errorf("-ttfc-rates: %q is not a positive rate", f)
		}
		out = append(out, r)
	}
	return out, nil
}

func parseDurations(s string) ([]time.Duration, error) {
	var out []time.Duration
	for _, f := range strings.Split(s, ",") {
		d, err := time.ParseDuration(strings.TrimSpace(f))
		if err != nil {
			return nil, fmt.Errorf("-latency: %w", err)
		}
		out = append(out, d)
	}
	return out, nil
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "bench:", err)
	os.Exit(1)
}
