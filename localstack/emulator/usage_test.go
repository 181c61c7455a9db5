package emulator

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// busyLoop counts in the shell itself: a second or so of CPU and no child
// process.
const busyLoop = `i=0; while [ $i -lt 600000 ]; do i=$((i+1)); done`

// runWait runs a command in the session and waits for it.
func (te *tenv) runWait(sessionID, script string) {
	te.t.Helper()
	_, recs := te.stream("POST", "/v2/sandboxes/sessions/"+sessionID+"/cmd", map[string]any{
		"command": "sh", "args": []string{"-c", script}, "wait": true,
	})
	if len(recs) == 0 || recs[len(recs)-1].Command == nil || recs[len(recs)-1].Command.ExitCode == nil || *recs[len(recs)-1].Command.ExitCode != 0 {
		te.t.Fatalf("%q did not exit 0: %+v", script, recs)
	}
}

// TestActiveCPUIsProcessCPU: a session's active CPU is what its commands'
// processes used (rusage), not their wall time: a CPU-busy command counts, a
// sleep that lasts longer does not. Vercel reports it on the stopped
// session, in the named sandbox's totals, and the ledger books it.
func TestActiveCPUIsProcessCPU(t *testing.T) {
	needSh(t)
	te := newEnv(t, Options{Exec: "host"})
	busy := te.create(map[string]any{"name": "busy"})
	idle := te.create(map[string]any{"name": "idle"})
	te.runWait(busy.Session.ID, busyLoop)
	te.runWait(idle.Session.ID, "sleep 2")
	// The fake clock says both ran a minute: the cap (duration × vCPUs)
	// does not hide anything.
	te.clk.Advance(time.Minute)
	b, i := te.stop(busy.Session.ID).Session, te.stop(idle.Session.ID).Session
	t.Logf("active CPU: busy loop %d ms, sleep 2 %d ms", b.ActiveCPUDurationMs, i.ActiveCPUDurationMs)
	if b.ActiveCPUDurationMs < 200 {
		t.Errorf("busy session activeCpuDurationMs = %d, want at least 200", b.ActiveCPUDurationMs)
	}
	if i.ActiveCPUDurationMs > 100 {
		t.Errorf("sleeping session activeCpuDurationMs = %d, want about 0 (it slept 2 s of wall time)", i.ActiveCPUDurationMs)
	}
	_, got := te.getSandbox("busy", false)
	if got.Sandbox.TotalActiveCPUDurationMs != b.ActiveCPUDurationMs {
		t.Errorf("totalActiveCpuDurationMs = %d, want the session's %d", got.Sandbox.TotalActiveCPUDurationMs, b.ActiveCPUDurationMs)
	}
	l := te.e.Ledger().Projects["prj_emulator"]
	if en := l.Sandboxes["busy"]; en.ActiveCPUMs != b.ActiveCPUDurationMs || en.SessionMs != b.Duration ||
		en.MemoryMBMs != b.Duration*b.Memory || en.Creations != 1 {
		t.Errorf("ledger busy = %+v, want the stopped session's figures %d ms CPU, %d ms, %d MB, one creation", en, b.ActiveCPUDurationMs, b.Duration, b.Memory)
	}
	if l.Total.SessionMs != b.Duration+i.Duration || l.Total.ActiveCPUMs != b.ActiveCPUDurationMs+i.ActiveCPUDurationMs || l.Total.Creations != 2 {
		t.Errorf("ledger project total = %+v, want the two sessions' sum", l.Total)
	}
}

// TestLedgerCountsSessionsAndSnapshots: every session start is a creation,
// stopped sessions add their time and memory, and the snapshots held count
// with their size until deleted.
func TestLedgerCountsSessionsAndSnapshots(t *testing.T) {
	te := newEnv(t, Options{})
	sb := te.create(map[string]any{"name": "p", "persistent": true})
	te.clk.Advance(30 * time.Second)
	first := te.stop(sb.Session.ID)
	if first.Snapshot == nil {
		t.Fatal("a persistent sandbox's stop made no snapshot")
	}
	_, resumed := te.getSandbox("p", true)
	te.clk.Advance(10 * time.Second)
	second := te.stop(resumed.Session.ID)
	en := te.e.Ledger().Projects["prj_emulator"].Sandboxes["p"]
	wantMs := first.Session.Duration + second.Session.Duration
	if en.Creations != 2 || en.SessionMs != wantMs || wantMs != 40_000 || en.MemoryMBMs != wantMs*first.Session.Memory {
		t.Errorf("ledger = %+v, want 2 creations and %d ms (40 s) at %d MB", en, wantMs, first.Session.Memory)
	}
	// keepLast may have evicted the first snapshot; what is held counts.
	var held int64
	for _, sn := range te.e.st.snapshots {
		if sn.usable(te.e.nowMs()) && sn.sandboxName == "p" {
			held += sn.sizeBytes
		}
	}
	if held == 0 || en.SnapshotBytes != held {
		t.Errorf("ledger snapshotBytes = %d, want the %d bytes of snapshots held", en.SnapshotBytes, held)
	}
	te.must(200, "DELETE", "/v2/sandboxes/snapshots/"+second.Snapshot.ID+prj, nil, nil)
	if got := te.e.Ledger().Projects["prj_emulator"].Sandboxes["p"].SnapshotBytes; got != held-second.Snapshot.SizeBytes {
		t.Errorf("snapshotBytes after deleting one = %d, want %d", got, held-second.Snapshot.SizeBytes)
	}
}

// TestLedgerSurvivesRestart: with a data directory of the caller's, an
// emulator started on it again keeps the earlier ledger and adds to it.
func TestLedgerSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	clk := NewFakeClock(t0)
	first, err := New(Options{Token: testToken, Exec: "none", Clock: clk, DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	te := &tenv{t: t, e: first, clk: clk, tok: testToken}
	te.serve()
	sb := te.create(map[string]any{"name": "r"})
	clk.Advance(20 * time.Second)
	te.stop(sb.Session.ID)
	before := first.Ledger().Projects["prj_emulator"].Sandboxes["r"]
	// The emulator's sandboxes and snapshots do not survive it (state.go
	// keeps them in memory): what they hold is not carried over.
	before.SnapshotBytes = 0
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, ledgerFile)); err != nil {
		t.Fatalf("ledger file: %v", err)
	}

	second, err := New(Options{Token: testToken, Exec: "none", Clock: clk, DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	te2 := &tenv{t: t, e: second, clk: clk, tok: testToken}
	te2.serve()
	if got := second.Ledger().Projects["prj_emulator"].Sandboxes["r"]; got != before || got.SessionMs != 20_000 || got.Creations != 1 {
		t.Fatalf("ledger after restart = %+v, want %+v (20 s, one creation)", got, before)
	}
	sb2 := te2.create(map[string]any{"name": "r"})
	clk.Advance(5 * time.Second)
	te2.stop(sb2.Session.ID)
	if got := second.Ledger().Projects["prj_emulator"].Sandboxes["r"]; got.SessionMs != 25_000 || got.Creations != 2 {
		t.Errorf("ledger after restart and one more session = %+v, want 25 s and two creations", got)
	}
	if err := second.Close(); err != nil {
		t.Fatal(err)
	}

	// A file that is not a ledger is refused by name, not silently reset.
	if err := os.WriteFile(filepath.Join(dir, ledgerFile), []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	if e, err := New(Options{Token: testToken, Exec: "none", Clock: clk, DataDir: dir}); err == nil {
		_ = e.Close()
		t.Error("New accepted a corrupt usage ledger")
	}
}

// serve puts te.e behind an httptest server for the rest of the test.
func (te *tenv) serve() {
	te.srv = httptest.NewServer(te.e.Handler())
	tr := &http.Transport{}
	te.hc = &http.Client{Transport: tr}
	te.t.Cleanup(func() {
		te.srv.Close()
		tr.CloseIdleConnections()
	})
}
