package emulator

import (
	"container/heap"
	"fmt"
	"os"
	"path/filepath"

	"github.com/getsentry/sandbox-controller/internal/vercel"
	"github.com/getsentry/sandbox-controller/localstack/emulator/sandboxruntime"
)

// emptySnapshotSize is the sizeBytes of a snapshot of a session whose
// filesystem was never touched (no directory exists for it).
const emptySnapshotSize = 4096

// setStatus changes a session's status and keeps every derived field in
// step. Called with e.mu held.
func (e *Emulator) setStatus(s *sessionRec, status vercel.SessionStatus, at int64) {
	if s.status == status {
		return
	}
	wasTerminal := s.status.Terminal()
	s.status = status
	s.updatedAt = at
	sb := s.sb
	if sb.current == s {
		sb.statusUpdatedAt = at
		sb.updatedAt = at
	}
	if status != vercel.SessionPending && s.readyCh != nil {
		select {
		case <-s.readyCh:
		default:
			close(s.readyCh)
		}
	}
	if status.Terminal() && !wasTerminal {
		if e.st.active[sb.scope.team]--; e.st.active[sb.scope.team] <= 0 {
			delete(e.st.active, sb.scope.team)
		}
		if s.doneCh != nil {
			select {
			case <-s.doneCh:
			default:
				close(s.doneCh)
			}
		}
	}
}

// maxRunning is the effective concurrency limit; limited is false when
// there is none.
func (e *Emulator) maxRunning() (n int, limited bool) {
	if n, ok := e.faults.maxRunningOverride(); ok {
		return n, true
	}
	return e.plan.MaxRunning, e.plan.MaxRunning > 0
}

// checkConcurrency answers 429 when the team already runs the maximum.
func (e *Emulator) checkConcurrency(team string) *apiError {
	max, limited := e.maxRunning()
	if limited && e.st.active[team] >= max {
		return &apiError{status: 429, code: "concurrency_limit_exceeded",
			message: fmt.Sprintf("The concurrency limit has been exceeded: %d sandboxes are already running (limit %d on the %s plan).", e.st.active[team], max, e.plan.Name)}
	}
	return nil
}

// bootSpec says where a new session's filesystem comes from.
type bootSpec struct {
	snap   *snapshotRec       // restore from this snapshot
	live   *sandboxruntime.FS // copy this live filesystem (fork of a running sandbox without snapshot)
	source *vercel.Source     // git or tarball source to materialise
}

// startSessionLocked creates a new session of sb (pending), registers it and
// makes it current. When the filesystem has to be prepared, the session is
// left booting and the caller must run bootSession without holding e.mu.
func (e *Emulator) startSessionLocked(sb *sandboxRec, boot bootSpec, now int64) *sessionRec {
	s := &sessionRec{
		id:          newSessionID(),
		seq:         e.st.nextSeq(),
		sb:          sb,
		status:      vercel.SessionPending,
		vcpus:       sb.vcpus,
		memory:      sb.memory,
		timeout:     sb.timeout,
		region:      sb.region,
		runtime:     sb.runtime,
		cwd:         defaultCwd,
		policy:      sb.policy,
		env:         sb.env,
		requestedAt: now,
		createdAt:   now,
		updatedAt:   now,
		readyAt:     now + durMs(e.opts.StartPending),
	}
	if boot.snap != nil {
		s.sourceSnapshotID = boot.snap.id
		e.touchSnapshotLocked(boot.snap, now)
		if boot.snap.dir != "" && !boot.snap.dirGone {
			boot.snap.users++
			s.booting = true
		}
	}
	if boot.live != nil {
		s.booting = true
	}
	if boot.source != nil && boot.source.Type != vercel.SourceSnapshot && e.runner.Mode() != sandboxruntime.ModeNone {
		s.booting = true
	}
	e.st.sessions[s.id] = s
	e.ledgerLocked(sb, LedgerEntry{Creations: 1})
	sb.sessions = append(sb.sessions, s)
	sb.current = s
	sb.statusUpdatedAt, sb.updatedAt = now, now
	e.st.active[sb.scope.team]++
	if e.opts.StartPending > 0 {
		e.st.timers.add(timerItem{at: s.readyAt, kind: timerStart, id: s.id})
		if e.fake == nil {
			e.kickSweeper()
		}
	}
	if !s.booting {
		e.tryStartLocked(s, now)
	}
	return s
}

// tryStartLocked turns a pending session running once its filesystem is
// ready and its start delay has passed.
func (e *Emulator) tryStartLocked(s *sessionRec, now int64) {
	if s.status != vercel.SessionPending || s.booting || s.inStop || now < s.readyAt {
		return
	}
	at := s.readyAt
	if s.updatedAt > at { // booted after the delay ran out
		at = s.updatedAt
	}
	if at > now {
		at = now
	}
	s.startedAt = at
	e.setStatus(s, vercel.SessionRunning, at)
	e.st.timers.add(timerItem{at: s.deadline(), kind: timerTimeout, id: s.id})
	if e.fake == nil {
		e.kickSweeper()
	}
}

// bootSession prepares a booting session's filesystem; e.mu must NOT be held.
// It returns with e.mu held.
func (e *Emulator) bootSession(s *sessionRec, boot bootSpec) {
	id := s.id
	dir := e.sessionDir(id)
	var (
		sfs *sandboxruntime.FS
		err error
	)
	switch {
	case boot.snap != nil && s.booting && boot.snap.dir != "":
		sfs, err = sandboxruntime.RestoreFS(boot.snap.dir, dir)
	case boot.live != nil:
		tmp := filepath.Join(e.dataDir, "tmp", id)
		if _, err = boot.live.SnapshotTo(tmp); err == nil {
			sfs, err = sandboxruntime.RestoreFS(tmp, dir)
		}
		_ = os.RemoveAll(tmp)
		if err != nil {
			e.log.Warn("emulator: fork could not copy the live filesystem; starting fresh", "session", id, "err", err)
			_ = os.RemoveAll(dir)
			sfs, err = sandboxruntime.NewFS(dir)
		}
	default:
		sfs, err = sandboxruntime.NewFS(dir)
	}
	if err == nil && boot.source != nil && e.runner.Mode() != sandboxruntime.ModeNone {
		switch boot.source.Type {
		case vercel.SourceGit:
			if gerr := e.gitClone(sfs, boot.source); gerr != nil {
				e.log.Warn("emulator: git source recorded but not cloned", "url", boot.source.URL, "err", gerr)
			}
		case vercel.SourceTarball:
			if terr := e.fetchTarball(sfs, boot.source.URL); terr != nil {
				e.log.Warn("emulator: tarball source recorded but not extracted", "url", boot.source.URL, "err", terr)
			}
		}
	}
	e.mu.Lock()
	now := e.nowMs()
	if boot.snap != nil && s.booting && boot.snap.dir != "" {
		e.releaseSnapshotLocked(boot.snap)
	}
	if s.status != vercel.SessionPending || s.inStop || !s.booting {
		// Stopped or deleted while booting: drop what was prepared.
		if sfs != nil {
			e.trash = append(e.trash, func() { _ = sfs.Remove() })
		}
		return
	}
	s.booting = false
	if err != nil {
		e.log.Error("emulator: session filesystem could not be prepared", "session", id, "err", err)
		s.abortedAt = now
		e.setStatus(s, vercel.SessionFailed, now)
		return
	}
	s.fs = sfs
	s.updatedAt = now
	e.tryStartLocked(s, now)
}

// ensureFSLocked gives a session its filesystem on first use.
func (e *Emulator) ensureFSLocked(s *sessionRec) (*sandboxruntime.FS, error) {
	if s.fs != nil {
		return s.fs, nil
	}
	f, err := sandboxruntime.NewFS(e.sessionDir(s.id))
	if err != nil {
		return nil, err
	}
	s.fs = f
	return f, nil
}

// ---- stopping ----

type stopKind int

const (
	stopRequested stopKind = iota
	stopTimeout
	stopSnapshot
	stopDelete
)

type stopJob struct {
	s          *sessionRec
	kind       stopKind
	at         int64
	snap       bool
	expiration int64
	snapID     string
	procs      []*sandboxruntime.Process
	fs         *sandboxruntime.FS
	net        *sessionNet
	size       int64
	err        error
	result     *snapshotRec
	hook       func() // test hook, run first in the slow part
}

func (j *stopJob) slow() bool { return len(j.procs) > 0 || j.fs != nil || j.net != nil }

// beginStopLocked claims a live session for stopping (or snapshotting).
// expiration is the snapshot expiration for stopSnapshot (ms, 0 = never).
func (e *Emulator) beginStopLocked(s *sessionRec, kind stopKind, at int64, expiration int64) *stopJob {
	j := &stopJob{s: s, kind: kind, at: at}
	s.inStop = true
	s.requestedStopAt = at
	switch kind {
	case stopSnapshot:
		j.snap, j.expiration = true, expiration
		s.snapshottedAt = at
		e.setStatus(s, vercel.SessionSnapshotting, at)
	case stopRequested, stopTimeout:
		switch {
		case !s.sb.persistent:
		case s.startedAt == 0 && s.sourceSnapshotID != "":
			// Stopped before it ever ran (possibly mid-restore): its content
			// is still the snapshot it was booting from.
			if s.sb.currentSnapshotID == "" {
				s.sb.currentSnapshotID = s.sourceSnapshotID
			}
		default:
			j.snap, j.expiration = true, e.snapshotExpirationFor(s.sb, nil, false)
		}
		e.setStatus(s, vercel.SessionStopping, at)
	default:
		e.setStatus(s, vercel.SessionStopping, at)
	}
	if j.snap {
		j.snapID = newSnapshotID()
	}
	for _, c := range s.commands {
		e.observeExit(c)
		if c.proc != nil && !c.exited {
			j.procs = append(j.procs, c.proc)
		}
	}
	j.fs = s.fs
	s.fs = nil
	j.net = s.net
	s.net = nil
	j.hook = e.hookStop
	return j
}

// runStopJob does the slow part of a stop without e.mu: kill processes,
// copy the filesystem into the snapshot, remove the session directory.
func (e *Emulator) runStopJob(j *stopJob) {
	if j.hook != nil {
		j.hook()
	}
	for _, p := range j.procs {
		p.Terminate()
	}
	if j.net != nil {
		j.net.close(e, j.s.id)
	}
	if j.fs == nil {
		return
	}
	if j.snap {
		j.size, j.err = j.fs.SnapshotTo(e.snapshotDir(j.snapID))
	}
	if err := j.fs.Remove(); err != nil {
		e.log.Warn("emulator: removing session filesystem", "session", j.s.id, "err", err)
	}
}

// finishStopLocked records the outcome of a stop.
func (e *Emulator) finishStopLocked(j *stopJob, now int64) {
	s, sb := j.s, j.s.sb
	at := now
	if j.kind == stopTimeout || !j.slow() {
		at = j.at
	}
	if j.snap {
		sn := &snapshotRec{
			id:              j.snapID,
			seq:             e.st.nextSeq(),
			scope:           sb.scope,
			sandboxName:     sb.name,
			sourceSessionID: s.id,
			region:          s.region,
			status:          vercel.SnapshotCreated,
			sizeBytes:       emptySnapshotSize,
			createdAt:       at,
			updatedAt:       at,
			lastUsedAt:      at,
			expiration:      j.expiration,
			creationMethod:  "automatic",
			parentID:        sb.currentSnapshotID,
		}
		if j.kind == stopSnapshot {
			sn.creationMethod = "manual"
		}
		if sn.parentID == "" {
			sn.parentID = s.sourceSnapshotID
		}
		if j.fs != nil {
			sn.dir = e.snapshotDir(j.snapID)
			if j.size > 0 {
				sn.sizeBytes = j.size
			}
		}
		if j.err != nil {
			e.log.Error("emulator: snapshot failed", "snapshot", sn.id, "err", j.err)
			sn.status = vercel.SnapshotFailed
			if sn.dir != "" {
				dir := sn.dir
				e.trash = append(e.trash, func() { _ = os.RemoveAll(dir) })
				sn.dirGone = true
			}
		}
		if sn.expiration > 0 {
			sn.expiresAt = at + sn.expiration
			e.st.timers.add(timerItem{at: sn.expiresAt, kind: timerSnapshotExpiry, id: sn.id})
		}
		e.st.snapshots[sn.id] = sn
		j.result = sn
		if sn.status == vercel.SnapshotCreated {
			sb.currentSnapshotID = sn.id
			sb.snaps = append(sb.snaps, sn)
			e.applyKeepLastLocked(sb, at)
		}
	}
	s.stoppedAt = at
	if s.startedAt > 0 && at > s.startedAt {
		s.duration = at - s.startedAt
	}
	// Active CPU is what the commands' processes used, not their wall
	// time: a sleeping command costs nothing (usage.go).
	s.activeCPU = sessionCPULocked(s)
	s.stoppedInfo = true
	s.inStop = false
	e.setStatus(s, vercel.SessionStopped, at)
	sb.totalDuration += s.duration
	sb.totalActiveCPU += s.activeCPU
	sb.totalEgress += s.egressBytes
	sb.totalIngress += s.ingressBytes
	sb.updatedAt = at
	e.ledgerStopLocked(s)
}

// stopLocked stops a live session completely; it may release and re-take
// e.mu for the slow part.
func (e *Emulator) stopLocked(s *sessionRec, kind stopKind, at int64, expiration int64) *stopJob {
	j := e.beginStopLocked(s, kind, at, expiration)
	if j.slow() {
		e.mu.Unlock()
		e.runStopJob(j)
		e.mu.Lock()
	}
	e.finishStopLocked(j, e.nowMs())
	return j
}

// snapshotExpirationFor resolves the expiration of a new snapshot of sb (ms,
// 0 = never): the request's value, else keepLastSnapshots.expiration, else
// the sandbox's snapshotExpiration, else 7 days on the v3 route, else the
// plan default (30 days).
func (e *Emulator) snapshotExpirationFor(sb *sandboxRec, body *int64, v3 bool) int64 {
	switch {
	case body != nil:
		return *body
	case sb.keepLast != nil && sb.keepLast.Expiration != nil:
		return *sb.keepLast.Expiration
	case sb.snapExp != nil:
		return *sb.snapExp
	case v3:
		return sevenDaysMs
	}
	return durMs(e.plan.DefaultSnapshotExpiration)
}

// applyKeepLastLocked evicts the sandbox's oldest snapshots beyond
// keepLastSnapshots.count (deleting them when deleteEvicted).
func (e *Emulator) applyKeepLastLocked(sb *sandboxRec, now int64) {
	kept := sb.snaps[:0]
	for _, sn := range sb.snaps {
		if sn.status == vercel.SnapshotCreated {
			kept = append(kept, sn)
		}
	}
	for i := len(kept); i < len(sb.snaps); i++ {
		sb.snaps[i] = nil
	}
	sb.snaps = kept
	if sb.keepLast == nil || int64(len(sb.snaps)) <= sb.keepLast.Count {
		return
	}
	evict := len(sb.snaps) - int(sb.keepLast.Count)
	if sb.keepLast.DeleteEvicted == nil || *sb.keepLast.DeleteEvicted {
		for _, sn := range sb.snaps[:evict] {
			e.deleteSnapshotLocked(sn, now)
		}
	}
	sb.snaps = append([]*snapshotRec(nil), sb.snaps[evict:]...)
}

// deleteSnapshotLocked marks a snapshot deleted and frees its files.
func (e *Emulator) deleteSnapshotLocked(sn *snapshotRec, now int64) {
	if sn.status == vercel.SnapshotDeleted {
		return
	}
	sn.status = vercel.SnapshotDeleted
	sn.updatedAt = now
	if sn.dir != "" && sn.users == 0 && !sn.dirGone {
		dir := sn.dir
		sn.dirGone = true
		e.trash = append(e.trash, func() { _ = os.RemoveAll(dir) })
	}
}

func (e *Emulator) releaseSnapshotLocked(sn *snapshotRec) {
	sn.users--
	if sn.users == 0 && sn.status != vercel.SnapshotCreated && sn.dir != "" && !sn.dirGone {
		dir := sn.dir
		sn.dirGone = true
		e.trash = append(e.trash, func() { _ = os.RemoveAll(dir) })
	}
}

// touchSnapshotLocked records a use of the snapshot (its expiry counts from
// the last use).
func (e *Emulator) touchSnapshotLocked(sn *snapshotRec, now int64) {
	sn.lastUsedAt, sn.updatedAt = now, now
	if sn.expiration > 0 {
		sn.expiresAt = now + sn.expiration
		e.st.timers.add(timerItem{at: sn.expiresAt, kind: timerSnapshotExpiry, id: sn.id})
	}
}

// usableSnapshotLocked finds a snapshot that can boot a session.
func (e *Emulator) usableSnapshotLocked(id string, rc *reqCtx, now int64) (*snapshotRec, *apiError) {
	sn := e.st.snapshots[id]
	if sn == nil || (rc != nil && !rc.visible(sn.scope)) || !sn.usable(now) {
		return nil, &apiError{status: 410, code: "snapshot_not_found", message: fmt.Sprintf("Snapshot %s not found: it does not exist, was deleted or has expired.", id)}
	}
	return sn, nil
}

// ---- sweeping ----

// sweep handles everything whose deadline on the clock has passed: pending
// sessions start, running sessions time out (with their automatic snapshot),
// snapshots expire. It runs before every request, from FakeClock.Advance,
// and from the background sweeper under the real clock.
func (e *Emulator) sweep() {
	e.mu.Lock()
	if e.closed {
		e.unlock()
		return
	}
	now := e.nowMs()
	if at, ok := e.st.timers.peek(); !ok || at > now {
		e.unlock()
		return
	}
	var jobs []*stopJob
	for {
		at, ok := e.st.timers.peek()
		if !ok || at > now {
			break
		}
		it := heap.Pop(&e.st.timers).(timerItem)
		switch it.kind {
		case timerStart:
			if s := e.st.sessions[it.id]; s != nil {
				e.tryStartLocked(s, now)
			}
		case timerTimeout:
			s := e.st.sessions[it.id]
			if s == nil || s.status != vercel.SessionRunning || s.inStop {
				continue
			}
			if d := s.deadline(); d > now || d != it.at {
				continue // extended; a later timer exists
			}
			j := e.beginStopLocked(s, stopTimeout, s.deadline(), 0)
			if j.slow() {
				jobs = append(jobs, j)
			} else {
				e.finishStopLocked(j, now)
			}
		case timerSnapshotExpiry:
			sn := e.st.snapshots[it.id]
			if sn != nil && sn.status == vercel.SnapshotCreated && sn.expiresAt != 0 && sn.expiresAt <= now && sn.expiresAt == it.at {
				e.deleteSnapshotLocked(sn, sn.expiresAt)
			}
		}
	}
	if len(jobs) == 0 {
		e.unlock()
		return
	}
	e.mu.Unlock()
	for _, j := range jobs {
		e.runStopJob(j)
	}
	e.mu.Lock()
	now = e.nowMs()
	for _, j := range jobs {
		e.finishStopLocked(j, now)
	}
	e.unlock()
}
