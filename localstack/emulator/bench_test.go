package emulator

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/getsentry/sandbox-controller/internal/vercel"
)

// The load target (exec mode "none", 2 cores): hold 10,000 live sandboxes
// in < 500 MB RSS, and serve ≥ 1,000 create+get+stop cycles/s with 8
// concurrent callers over loopback. Run:
//
//	go test ./localstack/emulator/ -run '^$' -bench 'BenchmarkClientCycle|BenchmarkHoldSandboxes' -benchtime 10000x -cpu 2
//
// Both go through the real Go client (internal/vercel) over a loopback
// listener. RSS is the whole test process (client and server).

const benchCallers = 8

// benchEmulator starts an emulator without limits that would slow a load test.
func benchEmulator(b *testing.B) (*Emulator, *vercel.Client, func()) {
	b.Helper()
	plan := PlanPro()
	plan.RequestsPerMinute = 0 // unlimited
	plan.DeletesPerSecond = 0
	plan.MaxRunning = 0
	e, err := New(Options{Exec: "none", Plan: plan, Token: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	url, err := e.Start("127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	tr := &http.Transport{MaxIdleConns: 64, MaxIdleConnsPerHost: 64}
	c, err := vercel.New(vercel.Config{
		BaseURL: url, Token: "bench", TeamID: "team_emulator", ProjectID: "prj_emulator",
		HTTPClient: &http.Client{Transport: tr}, RequestsPerMinute: -1,
	})
	if err != nil {
		b.Fatal(err)
	}
	return e, c, func() {
		tr.CloseIdleConnections()
		if err := e.Close(); err != nil {
			b.Error(err)
		}
	}
}

// parallel runs n jobs on benchCallers goroutines.
func parallel(b *testing.B, n int, job func(i int) error) {
	b.Helper()
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, benchCallers)
	for w := 0; w < benchCallers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				if err := job(i); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
}

// BenchmarkClientCycle measures create+get+stop cycles per second; every
// cycle leaves a stopped (persistent, snapshotted) sandbox behind, so with
// -benchtime 10000x it also ends holding 10,000 live sandboxes.
func BenchmarkClientCycle(b *testing.B) {
	e, c, done := benchEmulator(b)
	defer done()
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	parallel(b, b.N, func(i int) error {
		res, err := c.CreateSandbox(ctx, vercel.CreateSandboxRequest{Name: fmt.Sprintf("cycle-%d", i), Tags: map[string]string{"bench": "cycle"}})
		if err != nil {
			return err
		}
		if _, err := c.GetSandbox(ctx, res.Sandbox.Name, false); err != nil {
			return err
		}
		st, err := c.StopSession(ctx, res.Session.ID)
		if err != nil {
			return err
		}
		if st.Session.Status != vercel.SessionStopped {
			return fmt.Errorf("stop answered %s", st.Session.Status)
		}
		return nil
	})
	elapsed := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "cycles/s")
	b.ReportMetric(rssMB(), "rss-MB")
	if got := len(e.LiveSandboxes()); got != b.N {
		b.Fatalf("%d live sandboxes, want %d", got, b.N)
	}
}

// BenchmarkHoldSandboxes creates b.N running sandboxes (exec none) and
// reports the process RSS while holding them, the heap per sandbox and the
// goroutine count. With -benchtime 10000x it checks the 10,000-sandbox
// target (< 500 MB RSS).
func BenchmarkHoldSandboxes(b *testing.B) {
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	e, c, done := benchEmulator(b)
	defer done()
	ctx := context.Background()
	b.ResetTimer()
	start := time.Now()
	parallel(b, b.N, func(i int) error {
		_, err := c.CreateSandbox(ctx, vercel.CreateSandboxRequest{Name: fmt.Sprintf("hold-%d", i)})
		return err
	})
	elapsed := time.Since(start)
	b.StopTimer()
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	rss := rssMB()
	if got := len(e.LiveSandboxes()); got != b.N {
		b.Fatalf("%d live sandboxes, want %d", got, b.N)
	}
	if _, err := os.Stat(e.DataDir() + "/sessions"); err == nil {
		b.Fatal("exec none created session directories")
	}
	b.ReportMetric(rss, "rss-MB")
	b.ReportMetric(float64(after.HeapAlloc-min(before.HeapAlloc, after.HeapAlloc))/float64(b.N), "heap-B/sandbox")
	b.ReportMetric(float64(runtime.NumGoroutine()), "goroutines")
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "creates/s")
	if b.N >= 10000 && rss >= 500 {
		b.Errorf("RSS %.0f MB with %d sandboxes, want < 500 MB", rss, b.N)
	}
}

// rssMB reads the process's resident set size (Linux; 0 elsewhere).
func rssMB() float64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			return kb / 1024
		}
	}
	return 0
}
