package perf

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/metrics"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
)

// measured is the manager whose cost the idle and outage phases report: a
// child process running the real binary, or the in-process manager.
type measured interface {
	// writes returns the Sandbox and event writes it made so far.
	writes(ctx context.Context) (sandboxes, events int64, err error)
	// usage returns its RSS in bytes and CPU seconds so far.
	usage() (rss int64, cpu float64, err error)
	kind() string
}

func (h *harness) runIdleAndOutage(ctx context.Context) (*IdleResult, *OutageResult, error) {
	n := h.cfg.IdleN
	h.emu.Faults().SetLatency("*", 0)
	ns, err := h.newNamespace(ctx, "bench-idle")
	if err != nil {
		return nil, nil, err
	}
	h.logf("idle: creating %d Sandboxes", n)
	if err := h.readySandboxes(ctx, ns, n, func(i int) *sandboxv1.Sandbox {
		return benchSandbox(ns, fmt.Sprintf("sbx-%05d", i), ArmOperator)
	}); err != nil {
		return nil, nil, fmt.Errorf("idle: %w", err)
	}

	// The measured manager replaces the in-process one; starting it is the
	// no-op resync: every object is reconciled once and nothing changed.
	h.operator.stop()
	h.operator = nil
	h.rec.start()
	var m measured
	resyncStart := time.Now()
	emu0 := h.emu.Counts()
	var w0s, w0e int64
	if h.cfg.ManagerBinary != "" {
		if w0s, w0e, err = h.apiserverWrites(ctx); err != nil {
			return nil, nil, err
		}
		c, err := h.startChild(ctx)
		if err != nil {
			return nil, nil, err
		}
		h.child = c
		m = &childMeasured{h: h, c: c}
	} else {
		op, err := h.startOperator(ctx)
		if err != nil {
			return nil, nil, err
		}
		h.operator = op
		m = &inProcessMeasured{op}
	}
	idle := &IdleResult{N: n, Manager: m.kind(), PollIntervalSeconds: h.cfg.PollInterval.Seconds()}
	if err := h.waitRequests(ctx, "getSandbox", emu0["getSandbox"]+int64(n), 3*time.Minute); err != nil {
		return nil, nil, fmt.Errorf("resync: %w", err)
	}
	idle.ResyncSeconds = time.Since(resyncStart).Seconds()
	time.Sleep(2 * time.Second) // any write a reconcile makes lands well within this
	emu1 := h.emu.Counts()
	ws, we, err := m.writes(ctx)
	if err != nil {
		return nil, nil, err
	}
	idle.ResyncSandboxWritesPerObject = float64(ws-w0s) / float64(n)
	idle.ResyncEventWritesPerObject = float64(we-w0e) / float64(n)
	idle.ResyncVercelRequestsPerObject = float64(emu1["total"]-emu0["total"]) / float64(n)
	h.logf("resync: %.1fs, %.3f writes/obj, %.2f Vercel req/obj", idle.ResyncSeconds, idle.ResyncSandboxWritesPerObject, idle.ResyncVercelRequestsPerObject)

	if h.cfg.IdleWindow > 0 {
		if err := h.idleWindow(ctx, m, idle, resyncStart, emu1, ws); err != nil {
			return idle, nil, err
		}
	}
	if h.cfg.Outage <= 0 {
		return idle, nil, nil
	}
	outage, err := h.outage(ctx, ns, n)
	return idle, outage, err
}

// idleWindow observes the steady state: Vercel requests per object, writes,
// RSS and CPU.
func (h *harness) idleWindow(ctx context.Context, m measured, idle *IdleResult, resyncStart time.Time, emu0 map[string]int64, writes0 int64) error {
	win := h.cfg.IdleWindow
	h.logf("idle: observing %d Sandboxes for %s", idle.N, win)
	_, cpu0, err := m.usage()
	if err != nil {
		return err
	}
	t0 := time.Now()
	var rssMax int64
	for time.Since(t0) < win {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
		if rss, _, err := m.usage(); err == nil {
			rssMax = max(rssMax, rss)
		}
	}
	elapsed := time.Since(t0)
	rss, cpu1, err := m.usage()
	if err != nil {
		return err
	}
	emu1 := h.emu.Counts()
	ws, _, err := m.writes(ctx)
	if err != nil {
		return err
	}
	idle.WindowSeconds = elapsed.Seconds()
	byEndpoint := countsDelta(emu0, emu1)
	idle.VercelRequests = byEndpoint["total"]
	delete(byEndpoint, "total")
	idle.VercelRequestsByEndpoint = byEndpoint
	// Polls of objects created together come in waves; per object, the
	// gaps between consecutive requests from the resync on give the rate
	// without depending on where the window cuts a wave.
	perPoll, perHour := h.rec.ratePerObject(h.cfg.PollInterval)
	idle.VercelRequestsPerObjectPoll, idle.VercelRequestsPerObjectHour = perPoll, perHour
	idle.SandboxWritesInWindow = float64(ws - writes0)
	idle.RSSMiB, idle.RSSMaxMiB = mib(rss), mib(max(rssMax, rss))
	idle.CPUSeconds = cpu1 - cpu0
	idle.CPUPercentOfCore = 100 * idle.CPUSeconds / elapsed.Seconds()
	if _, ok := m.(*inProcessMeasured); ok {
		heap, total := goMemory()
		idle.HeapInUseMiB, idle.GoTotalMiB = mib(heap), mib(total)
		idle.Note = "RSS and CPU are the whole harness process: the manager, the emulator holding every sandbox of every round, the floor manager and the harness's watches. Run with a manager binary (make bench does) for the manager's own figures."
	}
	h.logf("idle: %.3f Vercel req/obj/poll, RSS %.1f MiB, CPU %.2fs", perPoll, idle.RSSMiB, idle.CPUSeconds)
	return nil
}

// outage makes Vercel answer 503 to everything for Config.Outage, with a
// spec change pending on every object, then measures the request rate
// during the outage and the time until every object is Synced again with the
// change applied.
func (h *harness) outage(ctx context.Context, ns string, n int) (*OutageResult, error) {
	d, capd := h.cfg.Outage, h.cfg.BackoffCap
	res := &OutageResult{N: n, OutageSeconds: d.Seconds(), BackoffCapSecs: capd.Seconds()}
	h.logf("outage: 503 for %s", d)
	h.emu.Faults().FailNext("*", math.MaxInt32, http.StatusServiceUnavailable)
	total0 := h.emu.RequestCount("")
	t0 := time.Now()

	// The pending change: a new session timeout, applied by an update call.
	list := &sandboxv1.SandboxList{}
	if err := h.kube.List(ctx, list, client.InNamespace(ns)); err != nil {
		return nil, err
	}
	gens := map[string]int64{}
	var mu sync.Mutex
	if err := forEach(ctx, len(list.Items), h.cfg.CreateConcurrency, func(ctx context.Context, i int) error {
		s := &list.Items[i]
		patch := client.RawPatch(types.MergePatchType, []byte(fmt.Sprintf(`{"spec":{"timeoutSeconds":%d}}`, sessionTimeoutSeconds+60)))
		if err := h.kube.Patch(ctx, s, patch); err != nil {
			return err
		}
		mu.Lock()
		gens[s.Name] = s.Generation
		mu.Unlock()
		return nil
	}); err != nil {
		return nil, err
	}

	var timeline []float64
	last := total0
	for time.Since(t0) < d {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Second):
		}
		c := h.emu.RequestCount("")
		timeline = append(timeline, float64(c-last))
		last = c
	}
	h.emu.Faults().FailNext("*", 0, 0)
	recoveredAt := time.Now()
	res.RequestsDuringOutage = last - total0
	res.RatePerSecond = timeline
	tail := min(len(timeline), int(capd.Seconds()))
	if tail > 0 {
		var s float64
		for _, v := range timeline[len(timeline)-tail:] {
			s += v
		}
		res.TailRate = s / float64(tail)
	}
	// One request per reconcile attempt: the client's retry budget lets
	// only the first few failures be retried (outageRetries), after which
	// the per-object backoff alone paces the load. Each object may also
	// have had one poll scheduled before the outage began.
	attempts := backoffAttempts(d, capd) + 1
	const outageRetries = 10
	res.BoundRequests = int64(n)*attempts + outageRetries
	res.TailRateBound = float64(n) / capd.Seconds()
	h.logf("outage over: %d requests (bound %d), tail %.2f/s (bound %.2f/s); waiting for recovery", res.RequestsDuringOutage, res.BoundRequests, res.TailRate, res.TailRateBound)

	// Recovery: every object Synced=True with the change applied.
	done := map[string]time.Duration{}
	deadline := recoveredAt.Add(h.cfg.RecoveryTimeout)
	for len(done) < len(gens) && time.Now().Before(deadline) {
		l := &sandboxv1.SandboxList{}
		if err := h.kube.List(ctx, l, client.InNamespace(ns)); err != nil {
			return nil, err
		}
		now := time.Since(recoveredAt)
		for i := range l.Items {
			s := &l.Items[i]
			if _, ok := done[s.Name]; ok {
				continue
			}
			if s.Status.ObservedGeneration >= gens[s.Name] && meta.IsStatusConditionTrue(s.Status.Conditions, sandboxv1.ConditionSynced) {
				done[s.Name] = now
			}
		}
		time.Sleep(250 * time.Millisecond)
	}
	res.Recovered = len(done)
	var all []time.Duration
	for _, v := range done {
		all = append(all, v)
	}
	sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
	if len(all) > 0 {
		res.RecoverySeconds = all[len(all)-1].Seconds()
		res.RecoveryP50Secs = pct(all, 50).Seconds()
	}
	if res.Recovered < n {
		res.RecoverySeconds = h.cfg.RecoveryTimeout.Seconds()
	}
	h.logf("recovery: %d of %d in %.1fs", res.Recovered, n, res.RecoverySeconds)
	return res, nil
}

// backoffAttempts counts the reconcile attempts of one object the
// workqueue's per-item exponential backoff (1 s, doubling, capped) allows in
// d, the first at once.
func backoffAttempts(d, capd time.Duration) int64 {
	var n int64 = 1
	var t, step time.Duration = 0, time.Second
	for {
		t += min(step, capd)
		if t > d {
			return n
		}
		n++
		step *= 2
	}
}

// waitRequests waits until the emulator has received at least want requests
// of op.
func (h *harness) waitRequests(ctx context.Context, op string, want int64, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for h.emu.RequestCount(op) < want {
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d %s requests within %s", h.emu.RequestCount(op), want, op, timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return nil
}

// inProcessMeasured reports the in-process manager: its own writes, and the
// whole process's memory and CPU.
type inProcessMeasured struct{ m *inProcess }

func (p *inProcessMeasured) kind() string { return "in-process" }

func (p *inProcessMeasured) writes(context.Context) (int64, int64, error) {
	s, e := sandboxWrites(nil, p.m.writes.snapshot())
	return s, e, nil
}

func (p *inProcessMeasured) usage() (int64, float64, error) { return procUsage("self") }

// childManager is cmd/manager running as a child process against the same
// control plane and emulator.
type childManager struct {
	cmd         *exec.Cmd
	done        chan error
	metricsAddr string
	log         *syncBuffer
}

func (h *harness) startChild(ctx context.Context) (*childManager, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, h.cfg.ManagerBinary,
		"--metrics-bind-address", addr,
		"--metrics-secure=false", // scraped over plain HTTP on loopback
		"--health-probe-bind-address", "0",
		"--vercel-api-url", h.vercelURL,
		"--vercel-team-id", "team_emulator",
		"--vercel-project-id", "prj_emulator",
		"--vercel-requests-per-minute", strconv.Itoa(h.cfg.RequestsPerMinute),
		"--poll-interval", h.cfg.PollInterval.String(),
		"--backoff-cap", h.cfg.BackoffCap.String(),
		"--max-concurrent-reconciles", strconv.Itoa(h.cfg.Concurrency),
		"--vercel-max-in-flight", strconv.Itoa(h.cfg.VercelInFlight),
	)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+h.kubeconfig, "VERCEL_TOKEN="+h.emu.Token())
	c := &childManager{cmd: cmd, done: make(chan error, 1), metricsAddr: addr, log: &syncBuffer{}}
	cmd.Stdout, cmd.Stderr = c.log, c.log
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", h.cfg.ManagerBinary, err)
	}
	go func() { c.done <- cmd.Wait() }()
	h.logf("started manager binary, pid %d", cmd.Process.Pid)
	return c, nil
}

func (c *childManager) stop() {
	_ = c.cmd.Process.Signal(os.Interrupt)
	select {
	case <-c.done:
	case <-time.After(30 * time.Second):
		_ = c.cmd.Process.Kill()
		<-c.done
	}
}

type childMeasured struct {
	h *harness
	c *childManager
}

func (p *childMeasured) kind() string {
	return fmt.Sprintf("child process (%s)", filepath.Base(p.h.cfg.ManagerBinary))
}

// writes reads the API server's request counters: while the child runs, it
// is the only writer of Sandboxes and events.
func (p *childMeasured) writes(ctx context.Context) (int64, int64, error) {
	select {
	case err := <-p.c.done:
		p.c.done <- err
		return 0, 0, fmt.Errorf("manager exited (%v): %s", err, tail(p.c.log.String(), 2000))
	default:
	}
	return p.h.apiserverWrites(ctx)
}

func (p *childMeasured) usage() (int64, float64, error) {
	return procUsage(strconv.Itoa(p.c.cmd.Process.Pid))
}

// apiserverWrites sums apiserver_request_total for writes to Sandboxes (and
// their status) and to events.
func (h *harness) apiserverWrites(ctx context.Context) (sandboxes, events int64, err error) {
	hc, err := rest.HTTPClientFor(h.rest)
	if err != nil {
		return 0, 0, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(h.rest.Host, "/")+"/metrics", nil)
	if err != nil {
		return 0, 0, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return 0, 0, fmt.Errorf("parse API server metrics: %w", err)
	}
	f := fams["apiserver_request_total"]
	if f == nil {
		return 0, 0, errors.New("API server metrics lack apiserver_request_total")
	}
	for _, m := range f.GetMetric() {
		l := map[string]string{}
		for _, lp := range m.GetLabel() {
			l[lp.GetName()] = lp.GetValue()
		}
		switch l["verb"] {
		case "POST", "PUT", "PATCH", "DELETE", "APPLY", "CREATE", "UPDATE":
		default:
			continue
		}
		v := int64(m.GetCounter().GetValue())
		switch l["resource"] {
		case "sandboxes":
			sandboxes += v
		case "events":
			events += v
		}
	}
	return sandboxes, events, nil
}

// scrapeManagerMetrics reads the operator's own series from the in-process
// manager's (or the child's) metrics endpoint.
func (h *harness) scrapeManagerMetrics(ctx context.Context) map[string]float64 {
	var addr string
	switch {
	case h.child != nil:
		addr = h.child.metricsAddr
	case h.operator != nil:
		addr = h.operator.metricsAddr
	default:
		return nil
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return nil
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return map[string]float64{"scrapeError": 1}
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return map[string]float64{"parseError": 1}
	}
	out := map[string]float64{}
	for name, f := range fams {
		if !strings.HasPrefix(name, "sandbox_controller_") {
			continue
		}
		for _, m := range f.GetMetric() {
			var lv []string
			for _, lp := range m.GetLabel() {
				lv = append(lv, lp.GetName()+"="+lp.GetValue())
			}
			key := name
			if len(lv) > 0 {
				key += "{" + strings.Join(lv, ",") + "}"
			}
			switch {
			case m.Counter != nil:
				out[key] = m.GetCounter().GetValue()
			case m.Gauge != nil:
				out[key] = m.GetGauge().GetValue()
			case m.Histogram != nil:
				out[key+"_count"] = float64(m.GetHistogram().GetSampleCount())
				out[key+"_sum"] = m.GetHistogram().GetSampleSum()
			}
		}
	}
	return out
}

// procUsage reads a process's RSS (bytes) and CPU time (seconds).
func procUsage(pid string) (int64, float64, error) {
	b, err := os.ReadFile("/proc/" + pid + "/status")
	if err != nil {
		return 0, 0, err
	}
	var rss int64
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "VmRSS:") {
			f := strings.Fields(line)
			if len(f) >= 2 {
				kb, _ := strconv.ParseInt(f[1], 10, 64)
				rss = kb * 1024
			}
		}
	}
	st, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return rss, 0, err
	}
	// Fields after the command name, which is in parentheses and may hold
	// spaces: utime and stime are the 14th and 15th fields overall.
	s := string(st)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	if len(f) < 13 {
		return rss, 0, errors.New("short /proc stat")
	}
	ut, _ := strconv.ParseFloat(f[11], 64)
	stt, _ := strconv.ParseFloat(f[12], 64)
	const clkTck = 100 // USER_HZ on Linux
	return rss, (ut + stt) / clkTck, nil
}

// goMemory reads this process's Go heap in use and the Go runtime's total
// mapped memory.
func goMemory() (heap, total int64) {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}, {Name: "/memory/classes/total:bytes"}}
	metrics.Read(s)
	return int64(s[0].Value.Uint64()), int64(s[1].Value.Uint64())
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// profileAPIServer writes a CPU profile of kube-apiserver over d to path.
func (h *harness) profileAPIServer(ctx context.Context, path string, d time.Duration) {
	hc, err := rest.HTTPClientFor(h.rest)
	if err != nil {
		h.logf("apiserver profile: %v", err)
		return
	}
	u := fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", strings.TrimSuffix(h.rest.Host, "/"), int(d.Seconds()))
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return
	}
	resp, err := hc.Do(req)
	if err != nil {
		h.logf("apiserver profile: %v", err)
		return
	}
	defer resp.Body.Close()
	f, err := os.Create(path)
	if err != nil {
		h.logf("apiserver profile: %v", err)
		return
	}
	defer f.Close()
	if _, err := io.Copy(f, resp.Body); err != nil {
		h.logf("apiserver profile: %v", err)
		return
	}
	h.logf("wrote kube-apiserver CPU profile to %s", path)
}
