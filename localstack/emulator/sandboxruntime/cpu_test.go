package sandboxruntime

import (
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// busyScript counts in the shell itself (no child processes): about a second
// or more of CPU on a shared machine, none of it sleeping.
const busyScript = `i=0; while [ $i -lt 600000 ]; do i=$((i+1)); done`

// TestCPUTimeCountsWorkNotSleep: active CPU is what the command's processes
// used, as the kernel reports it — a busy loop counts, a sleep of longer
// wall time does not. Before, the emulator billed a command's wall time.
func TestCPUTimeCountsWorkNotSleep(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	r := rtNamespaceRunner(t)
	f, _ := rtNewFS(t)

	busy, err := r.Start(Command{FS: f, Name: "sh", Args: []string{"-c", busyScript}})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	// While it runs, /proc gives the CPU used so far.
	var live time.Duration
	for live == 0 && time.Since(start) < 20*time.Second {
		time.Sleep(300 * time.Millisecond)
		live = busy.CPUTime()
	}
	if res := rtWait(t, busy); res.code != 0 {
		t.Fatalf("busy loop = %+v", res)
	}
	wall := time.Since(start)
	cpu := busy.CPUTime()
	t.Logf("busy loop: %s CPU in %s wall; %s read while running", cpu, wall, live)
	if live <= 0 {
		t.Errorf("CPUTime while running = %s, want > 0 (from /proc)", live)
	}
	if cpu < 200*time.Millisecond || cpu > wall+100*time.Millisecond {
		t.Errorf("CPUTime of the busy loop = %s in %s wall, want at least 200ms and at most the wall time", cpu, wall)
	}
	if cpu < live {
		t.Errorf("CPUTime after exit %s < %s read while running", cpu, live)
	}

	sleeper, err := r.Start(Command{FS: f, Name: "sh", Args: []string{"-c", "sleep 2"}})
	if err != nil {
		t.Fatal(err)
	}
	if res := rtWait(t, sleeper); res.code != 0 {
		t.Fatalf("sleep = %+v", res)
	}
	if got := sleeper.CPUTime(); got > 100*time.Millisecond {
		t.Errorf("CPUTime of sleep 2 = %s, want about zero", got)
	}
}

// TestCPUTimeCountsWaitedChildren: the CPU of the processes a command runs
// and waits for (a shell script's commands) is the command's.
func TestCPUTimeCountsWaitedChildren(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	r := rtNamespaceRunner(t)
	f, _ := rtNewFS(t)
	p, err := r.Start(Command{FS: f, Name: "sh", Args: []string{"-c", "sh -c '" + busyScript + "'; exit 0"}})
	if err != nil {
		t.Fatal(err)
	}
	if res := rtWait(t, p); res.code != 0 {
		t.Fatalf("nested busy loop = %+v", res)
	}
	if got := p.CPUTime(); got < 200*time.Millisecond {
		t.Errorf("CPUTime of a shell running a busy child = %s, want at least 200ms", got)
	}
}

// TestCPUTimeModeNone: in mode none nothing runs and nothing is used.
func TestCPUTimeModeNone(t *testing.T) {
	r, err := NewRunner(ModeNone, RunnerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := r.Start(Command{Name: "sh", Args: []string{"-c", busyScript}})
	if err != nil {
		t.Fatal(err)
	}
	<-p.Done()
	if got := p.CPUTime(); got != 0 {
		t.Errorf("CPUTime in mode none = %s, want 0", got)
	}
}

// TestLiveCPUTimeOfThisProcess: the /proc reader parses a real stat line
// and answers zero for a process that is not there.
func TestLiveCPUTimeOfThisProcess(t *testing.T) {
	deadline := time.Now().Add(5 * time.Second)
	for liveCPUTime(os.Getpid()) == 0 && time.Now().Before(deadline) {
		for i := 0; i < 1e7; i++ {
			_ = i * i
		}
	}
	if liveCPUTime(os.Getpid()) == 0 {
		t.Error("liveCPUTime of this busy test process = 0")
	}
	if liveCPUTime(1<<30) != 0 {
		t.Error("liveCPUTime of a pid that does not exist must be 0")
	}
}
