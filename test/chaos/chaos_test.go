package chaos

import (
	"context"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// chaosSeed picks the short run's random choices; make test uses 15. Another seed:
// go test ./test/chaos/ -run TestChaosShort -v -args -chaos.seed=7
var chaosSeed = flag.Int64("chaos.seed", 15, "seed of TestChaosShort's workload, faults and kills")

// TestChaosShort is the short seeded soak `make test` runs: the same harness
// as `make chaos` (two leader-elected manager processes SIGKILLed every few
// seconds, every fault kind, the black hole, a namespace deletion most
// likely) over about 40 objects in 75 s, then up to 4 minutes to converge.
// Every target of the table must be met.
func TestChaosShort(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a control plane, the emulator and two manager processes")
	}
	dir, err := os.MkdirTemp("", "chaos-short-")
	if err != nil {
		t.Fatal(err)
	}
	// Run as root, the emulator runs commands as an unprivileged user.
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "manager")
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	build := exec.Command("go", "build", "-o", bin, "./cmd/manager")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/manager: %v\n%s", err, out)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	log := &testLog{t: t}
	defer log.close()
	rep, err := Run(ctx, Config{
		Seed:        *chaosSeed,
		Duration:    75 * time.Second,
		Objects:     40,
		Namespaces:  2,
		OpInterval:  300 * time.Millisecond,
		KillEvery:   8 * time.Second,
		FaultEvery:  3 * time.Second,
		BlackHole:   10 * time.Second,
		BlackHoleAt: 30 * time.Second,
		Converge:    4 * time.Minute,
		ManagerBin:  bin,
		RepoRoot:    root,
		WorkDir:     filepath.Join(dir, "run"),
		Log:         log,
	})
	if err != nil {
		t.Fatalf("the soak could not run (logs in %s): %v", dir, err)
	}
	t.Log("\n" + rep.Table() + rep.Details())
	missed := rep.Missed()
	for _, m := range missed {
		t.Error(m)
	}
	// Each kind of workload operation and of fault took place.
	done := map[string]int{}
	for _, o := range rep.Ops {
		done[o.name] = o.n
	}
	for _, op := range []string{opCreateSandbox, opChangeSpec, opPause, opResume, opHeartbeat, opCapture, opRecipe, opFork, opScale, opDelete, opDeleteNamespace,
		opCreatePool, opClaim, opScalePool, opDeletePool} {
		if done[op] == 0 {
			t.Errorf("the workload did no %q", op)
		}
	}
	injected := map[string]int{}
	for _, f := range rep.Faults {
		injected[f.name] = f.n
	}
	for _, f := range []string{faultRetryAfter, faultNoRetry, fault5xx, faultDropped, faultBlackHole} {
		if injected[f] == 0 {
			t.Errorf("no %q fault was injected", f)
		}
	}
	if rep.Kills < 5 {
		t.Errorf("%d SIGKILLs, want at least 5", rep.Kills)
	}
	if rep.Canaries == 0 {
		t.Error("no canary value was issued")
	}
	if t.Failed() {
		t.Logf("logs and state kept in %s", dir)
		return
	}
	_ = os.RemoveAll(dir)
}

// testLog forwards the harness's progress lines to t.Log until the test ends.
type testLog struct {
	mu     sync.Mutex
	t      *testing.T
	closed bool
}

func (l *testLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.closed {
		l.t.Log(strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}

func (l *testLog) close() {
	l.mu.Lock()
	l.closed = true
	l.mu.Unlock()
}
