package emulator

import (
	"encoding/json"
	"errors"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
)

// ledgerFile, in the data directory, keeps the ledger across emulator
// restarts when the data directory is the caller's (Options.DataDir).
const ledgerFile = "usage-ledger.json"

// Ledger is the emulator's own account of what its sandboxes used, the
// figures a Vercel invoice would be computed from: tests compare what the
// operator attributes to namespaces with it. Sessions count when they stop,
// as Vercel reports them (a running session is not in it yet).
type Ledger struct {
	// Projects by project id.
	Projects map[string]ProjectLedger `json:"projects"`
}

// ProjectLedger is one project's usage: its sandboxes' sum and each named
// sandbox's own.
type ProjectLedger struct {
	Total     LedgerEntry            `json:"total"`
	Sandboxes map[string]LedgerEntry `json:"sandboxes"`
}

// LedgerEntry is usage in the units Vercel bills.
type LedgerEntry struct {
	// ActiveCPUMs is the CPU time (user + system) of the sessions' commands
	// (sandboxruntime.Process.CPUTime), capped at duration × vCPUs.
	ActiveCPUMs int64 `json:"activeCpuMs"`
	// SessionMs is the sessions' running time.
	SessionMs int64 `json:"sessionMs"`
	// MemoryMBMs is each session's memory (MB) times its running time (ms).
	MemoryMBMs int64 `json:"memoryMbMs"`
	// EgressBytes and IngressBytes went through the session's egress proxy.
	EgressBytes  int64 `json:"egressBytes"`
	IngressBytes int64 `json:"ingressBytes"`
	// Creations counts sessions started (each is a VM boot: a create, a
	// resume, a fork).
	Creations int64 `json:"creations"`
	// SnapshotBytes is the size of the snapshots held now (created, not
	// deleted or expired). It is not kept across restarts: snapshots are not.
	SnapshotBytes int64 `json:"snapshotBytes"`
}

func (l *LedgerEntry) add(o LedgerEntry) {
	l.ActiveCPUMs += o.ActiveCPUMs
	l.SessionMs += o.SessionMs
	l.MemoryMBMs += o.MemoryMBMs
	l.EgressBytes += o.EgressBytes
	l.IngressBytes += o.IngressBytes
	l.Creations += o.Creations
	l.SnapshotBytes += o.SnapshotBytes
}

// ledgerBook is the ledger as kept: per project and sandbox name, without
// snapshot storage (computed from the snapshots held when asked). Guarded by
// Emulator.mu.
type ledgerBook map[string]map[string]LedgerEntry

// Ledger returns a copy of the emulator's usage ledger.
func (e *Emulator) Ledger() Ledger {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := Ledger{Projects: map[string]ProjectLedger{}}
	project := func(p string) ProjectLedger {
		pl, ok := out.Projects[p]
		if !ok {
			pl = ProjectLedger{Sandboxes: map[string]LedgerEntry{}}
		}
		return pl
	}
	for p, sbs := range e.usage {
		pl := project(p)
		maps.Copy(pl.Sandboxes, sbs)
		out.Projects[p] = pl
	}
	now := e.nowMs()
	for _, sn := range e.st.snapshots {
		if !sn.usable(now) {
			continue
		}
		pl := project(sn.scope.project)
		en := pl.Sandboxes[sn.sandboxName]
		en.SnapshotBytes += sn.sizeBytes
		pl.Sandboxes[sn.sandboxName] = en
		out.Projects[sn.scope.project] = pl
	}
	for p, pl := range out.Projects {
		pl.Total = LedgerEntry{}
		for _, en := range pl.Sandboxes {
			pl.Total.add(en)
		}
		out.Projects[p] = pl
	}
	return out
}

// sessionCPULocked is the active CPU of a stopping session in ms: what its
// commands' processes used, at most its duration on all its vCPUs.
func sessionCPULocked(s *sessionRec) int64 {
	var cpu int64
	for _, c := range s.commands {
		if c.proc != nil {
			cpu += c.proc.CPUTime().Milliseconds()
		}
	}
	return max(min(cpu, s.duration*s.vcpus), 0)
}

// ledgerLocked adds one entry to sandbox sb's line and keeps the ledger.
func (e *Emulator) ledgerLocked(sb *sandboxRec, en LedgerEntry) {
	if e.usage == nil {
		e.usage = ledgerBook{}
	}
	p := sb.scope.project
	if e.usage[p] == nil {
		e.usage[p] = map[string]LedgerEntry{}
	}
	cur := e.usage[p][sb.name]
	cur.add(en)
	e.usage[p][sb.name] = cur
	e.saveLedgerLocked()
}

// ledgerStopLocked books a stopped session.
func (e *Emulator) ledgerStopLocked(s *sessionRec) {
	e.ledgerLocked(s.sb, LedgerEntry{
		ActiveCPUMs:  s.activeCPU,
		SessionMs:    s.duration,
		MemoryMBMs:   s.duration * s.memory,
		EgressBytes:  s.egressBytes,
		IngressBytes: s.ingressBytes,
	})
}

// saveLedgerLocked writes the ledger to the caller's data directory (not a
// temporary one, which dies with the emulator), replacing the file
// atomically so a crash leaves the previous ledger.
func (e *Emulator) saveLedgerLocked() {
	if e.tempDir || e.dataDir == "" {
		return
	}
	b, err := json.Marshal(e.usage)
	if err != nil {
		return
	}
	path := filepath.Join(e.dataDir, ledgerFile)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		e.log.Warn("emulator: writing the usage ledger", "err", err)
		return
	}
	if err := os.Rename(tmp, path); err != nil {
		e.log.Warn("emulator: writing the usage ledger", "err", err)
	}
}

// loadLedger reads the ledger an earlier emulator left in the data
// directory.
func (e *Emulator) loadLedger() error {
	if e.tempDir {
		return nil
	}
	b, err := os.ReadFile(filepath.Join(e.dataDir, ledgerFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var book ledgerBook
	if err := json.Unmarshal(b, &book); err != nil {
		return errors.New("emulator: " + ledgerFile + " in the data directory is not a usage ledger: " + err.Error())
	}
	e.usage = book
	return nil
}
