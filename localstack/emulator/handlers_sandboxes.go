package emulator

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/getsentry/sandbox-controller/internal/vercel"
)

// sandboxAndSession is the answer of GET (and PATCH ?resume=true) on a named
// sandbox: vercel.SandboxResponse omits `resumed` when false, but the
// OpenAPI document requires all four keys there.
type sandboxAndSession struct {
	Sandbox vercel.Sandbox  `json:"sandbox"`
	Session *vercel.Session `json:"session"`
	Routes  []vercel.Route  `json:"routes"`
	Resumed bool            `json:"resumed"`
}

func (e *Emulator) duplicateName(name string) *apiError {
	return &apiError{status: e.opts.DuplicateNameStatus, code: codeForStatus(e.opts.DuplicateNameStatus),
		message: fmt.Sprintf("A sandbox named %q already exists in this project. Use `GET /v2/sandboxes/%s` to retrieve it.", name, name)}
}

func sandboxNotFound(name string) *apiError {
	return notFound("Sandbox %q not found.", name)
}

// reserveLocked returns the name of a new sandbox in sc: the requested one or
// a fresh generated one. A taken name, and a team already running its
// maximum of sessions, are refused.
func (e *Emulator) reserveLocked(sc scope, b *createBody) (string, *apiError) {
	name := ""
	if b.Name != nil {
		if e.st.sandbox(sc, *b.Name) != nil {
			return "", e.duplicateName(*b.Name)
		}
		name = *b.Name
	}
	for name == "" {
		if n := newSandboxName(); e.st.sandbox(sc, n) == nil {
			name = n
		}
	}
	return name, e.checkConcurrency(sc.team)
}

// launchLocked registers a new sandbox and starts its first session (booting
// it without the lock when its filesystem must be prepared), and renders the
// answer of create and fork. Called and returns with e.mu held.
func (e *Emulator) launchLocked(sb *sandboxRec, boot bootSpec, now int64) vercel.SandboxResponse {
	m := e.st.sandboxes[sb.scope]
	if m == nil {
		m = map[string]*sandboxRec{}
		e.st.sandboxes[sb.scope] = m
	}
	m[sb.name] = sb
	s := e.startSessionLocked(sb, boot, now)
	e.bootIfNeeded(s, boot)
	sess := e.renderSession(s)
	return vercel.SandboxResponse{Sandbox: e.renderSandbox(sb), Session: &sess, Routes: e.renderRoutes(s)}
}

// bootIfNeeded prepares a booting session's filesystem without the lock.
// Called and returns with e.mu held.
func (e *Emulator) bootIfNeeded(s *sessionRec, boot bootSpec) {
	if s.booting {
		e.mu.Unlock()
		e.bootSession(s, boot) // re-locks
	}
}

func (e *Emulator) handleCreate(rc *reqCtx) {
	var b createBody
	if err := rc.decode(&b, true); err != nil {
		rc.fail(err)
		return
	}
	kind := map[string]routeKind{"v2": routeCreateV2, "v3": routeCreateV3, "v4": routeCreateV4}[rc.version]
	if err := e.validateCreate(&b, kind, nil); err != nil {
		rc.fail(err)
		return
	}
	explicit := ""
	if b.ProjectID != nil {
		explicit = *b.ProjectID
	}
	project, perr := rc.project(explicit, "projectId")
	if perr != nil {
		rc.fail(perr)
		return
	}
	sc := scope{rc.team, project}
	e.answerLocked(rc, func() (any, *apiError) {
		now := e.nowMs()
		name, err := e.reserveLocked(sc, &b)
		if err != nil {
			return nil, err
		}
		var boot bootSpec
		if b.Source != nil {
			src, _ := checkSource(b.Source)
			if src.Type != vercel.SourceSnapshot {
				boot.source = src
			} else if boot.snap, err = e.usableSnapshotLocked(src.SnapshotID, rc, now); err != nil {
				return nil, err
			} else if b.Region != nil && *b.Region != boot.snap.region && !slices.Contains(b.FailoverRegions, boot.snap.region) {
				return nil, &apiError{status: 400, code: "snapshot_region_mismatch",
					message: fmt.Sprintf("Snapshot %s is only available in %s, not in %s.", boot.snap.id, boot.snap.region, *b.Region)}
			}
		}
		sb := &sandboxRec{
			scope:      sc,
			name:       name,
			seq:        e.st.nextSeq(),
			persistent: true,
			vcpus:      defaultVCPUs,
			memory:     defaultVCPUs * memoryPerVCPU,
			timeout:    durMs(e.plan.DefaultTimeout),
			region:     defaultRegion,
			cwd:        defaultCwd,
			createdAt:  now,
			updatedAt:  now,
		}
		switch {
		case boot.snap != nil:
			sb.region = boot.snap.region
		case kind == routeCreateV2 && b.Image == nil:
			sb.runtime = defaultRuntime
		case b.Image == nil:
			sb.image = pinImage(defaultImage)
		}
		e.configFromBody(sb, &b, kind)
		sb.source = boot.source
		return e.launchLocked(sb, boot, now), nil
	})
}

// lookupSandboxLocked finds a named sandbox of the request's project.
func (e *Emulator) lookupSandboxLocked(rc *reqCtx) (*sandboxRec, *apiError) {
	sc, err := rc.queryProject("projectId")
	if err != nil {
		return nil, err
	}
	sb := e.st.sandbox(sc, rc.param("name"))
	if sb == nil {
		return nil, sandboxNotFound(rc.param("name"))
	}
	return sb, nil
}

// stoppedSandboxLocked finds a named sandbox of the request's project once
// none of its sessions runs: it waits for the stops and snapshots in flight,
// then stops what still runs. Called and returns with e.mu held.
func (e *Emulator) stoppedSandboxLocked(rc *reqCtx) (*sandboxRec, *apiError) {
	for {
		sb, err := e.lookupSandboxLocked(rc)
		if err != nil {
			return nil, err
		}
		if i := slices.IndexFunc(sb.sessions, func(s *sessionRec) bool { return s.inStop }); i >= 0 {
			if err := e.waitUnlocked(rc, sb.sessions[i].waitDone(), nil); err != nil {
				return nil, err
			}
			continue
		}
		i := slices.IndexFunc(sb.sessions, func(s *sessionRec) bool { return !s.status.Terminal() })
		if i < 0 {
			return sb, nil
		}
		e.stopLocked(sb.sessions[i], stopDelete, e.nowMs(), 0)
	}
}

// resumeLocked starts a new session from the sandbox's current snapshot when
// its current session is not running. It reports whether it resumed.
func (e *Emulator) resumeLocked(sb *sandboxRec) (bool, *apiError) {
	cur := sb.current
	if cur != nil {
		switch cur.status {
		case vercel.SessionPending, vercel.SessionRunning:
			return false, nil
		case vercel.SessionStopping:
			return false, &apiError{status: 422, code: "sandbox_stopping", message: fmt.Sprintf("Sandbox %q cannot be resumed while its session %s is stopping.", sb.name, cur.id)}
		case vercel.SessionSnapshotting:
			return false, &apiError{status: 422, code: "sandbox_snapshotting", message: fmt.Sprintf("Sandbox %q cannot be resumed while its session %s is being snapshotted.", sb.name, cur.id)}
		}
	}
	now := e.nowMs()
	var snap *snapshotRec
	if sb.currentSnapshotID != "" {
		snap, _ = e.usableSnapshotLocked(sb.currentSnapshotID, nil, now)
	}
	if snap == nil {
		return false, &apiError{status: 410, code: "snapshot_not_found", message: "Cannot resume sandbox: no snapshot available."}
	}
	if err := e.checkConcurrency(sb.scope.team); err != nil {
		return false, err
	}
	boot := bootSpec{snap: snap}
	s := e.startSessionLocked(sb, boot, now)
	e.bootIfNeeded(s, boot)
	return true, nil
}

// renderWithSession renders a sandbox with its current session and routes.
func (e *Emulator) renderWithSession(sb *sandboxRec, resumed bool) sandboxAndSession {
	resp := sandboxAndSession{Sandbox: e.renderSandbox(sb), Routes: []vercel.Route{}, Resumed: resumed}
	if sb.current != nil {
		sess := e.renderSession(sb.current)
		resp.Session = &sess
		resp.Routes = e.renderRoutes(sb.current)
	}
	return resp
}

func truthy(v string) bool { return v == "true" || v == "1" }

func (e *Emulator) handleGetSandbox(rc *reqCtx) {
	resume := truthy(rc.query("resume"))
	serve(e, rc, e.lookupSandboxLocked, func(sb *sandboxRec) (any, *apiError) {
		resumed := false
		if resume {
			var err *apiError
			if resumed, err = e.resumeLocked(sb); err != nil {
				return nil, err
			}
		}
		return e.renderWithSession(sb, resumed), nil
	})
}

func (e *Emulator) handleUpdateSandbox(rc *reqCtx) {
	var b updateBody
	if err := rc.decode(&b, true); err != nil {
		rc.fail(err)
		return
	}
	resume := truthy(rc.query("resume"))
	serve(e, rc, e.lookupSandboxLocked, func(sb *sandboxRec) (any, *apiError) {
		if err := e.validateUpdate(&b, sb); err != nil {
			return nil, err
		}
		now := e.nowMs()
		if b.CurrentSnapshotID != nil {
			sn := e.st.snapshots[*b.CurrentSnapshotID]
			if sn == nil || sn.scope != sb.scope || !sn.usable(now) {
				return nil, invalid("currentSnapshotId", "must reference an active snapshot of this project")
			}
		}
		e.updateFromBody(sb, &b, now)
		if !resume {
			resp := vercel.SandboxResponse{Sandbox: e.renderSandbox(sb), Routes: []vercel.Route{}}
			if sb.current != nil {
				resp.Routes = e.renderRoutes(sb.current)
			}
			return resp, nil
		}
		resumed, err := e.resumeLocked(sb)
		if err != nil {
			return nil, err
		}
		return e.renderWithSession(sb, resumed), nil
	})
}

func (e *Emulator) handleDeleteSandbox(rc *reqCtx) {
	deleteOrphans := truthy(rc.query("deleteOrphanSnapshots"))
	serve(e, rc, e.stoppedSandboxLocked, func(sb *sandboxRec) (any, *apiError) {
		now := e.nowMs()
		delete(e.st.sandboxes[sb.scope], sb.name)
		if len(e.st.sandboxes[sb.scope]) == 0 {
			delete(e.st.sandboxes, sb.scope)
		}
		for _, s := range sb.sessions {
			delete(e.st.sessions, s.id)
		}
		if deleteOrphans {
			e.deleteOrphanSnapshotsLocked(sb, now)
		}
		return struct {
			Sandbox vercel.Sandbox `json:"sandbox"`
		}{e.renderSandbox(sb)}, nil
	})
}

// deleteOrphanSnapshotsLocked deletes the snapshots of a deleted sandbox that
// no other sandbox uses (as its current snapshot or a session's source).
func (e *Emulator) deleteOrphanSnapshotsLocked(sb *sandboxRec, now int64) {
	used := map[string]bool{}
	for _, other := range e.st.sandboxes[sb.scope] {
		if other.currentSnapshotID != "" {
			used[other.currentSnapshotID] = true
		}
	}
	for _, s := range e.st.sessions {
		if s.sourceSnapshotID != "" && !s.status.Terminal() {
			used[s.sourceSnapshotID] = true
		}
	}
	for _, sn := range e.st.snapshots {
		if sn.scope == sb.scope && sn.sandboxName == sb.name && sn.status == vercel.SnapshotCreated && !used[sn.id] {
			e.deleteSnapshotLocked(sn, now)
		}
	}
}

func (e *Emulator) handleFork(rc *reqCtx) {
	var b createBody
	if err := rc.decode(&b, true); err != nil {
		rc.fail(err)
		return
	}
	kind := routeForkV2
	if rc.version == "v3" {
		kind = routeForkV3
	}
	serve(e, rc, e.lookupSandboxLocked, func(src *sandboxRec) (any, *apiError) {
		if err := e.validateCreate(&b, kind, src); err != nil {
			return nil, err
		}
		if b.ProjectID != nil && *b.ProjectID != src.scope.project {
			return nil, invalid("projectId", "must be the project of the source sandbox (%s)", src.scope.project)
		}
		name, err := e.reserveLocked(src.scope, &b)
		if err != nil {
			return nil, err
		}
		now := e.nowMs()
		sb := &sandboxRec{
			scope:        src.scope,
			name:         name,
			seq:          e.st.nextSeq(),
			persistent:   src.persistent,
			vcpus:        src.vcpus,
			memory:       src.memory,
			timeout:      src.timeout,
			runtime:      src.runtime,
			image:        src.image,
			architecture: src.architecture,
			region:       src.region,
			failover:     slices.Clone(src.failover),
			networkID:    src.networkID,
			policy:       src.policy,
			env:          src.env,
			ports:        slices.Clone(src.ports),
			tags:         maps.Clone(src.tags),
			snapExp:      src.snapExp,
			keepLast:     src.keepLast,
			source:       src.source,
			cwd:          src.cwd,
			createdAt:    now,
			updatedAt:    now,
		}
		e.configFromBody(sb, &b, kind)
		// Filesystem: the source's current snapshot; else, for a running source
		// without one, a copy of its live filesystem; else a fresh one.
		var boot bootSpec
		if src.currentSnapshotID != "" {
			boot.snap, _ = e.usableSnapshotLocked(src.currentSnapshotID, nil, now)
		}
		if boot.snap == nil && src.current != nil && src.current.status == vercel.SessionRunning && !src.current.inStop && src.current.fs != nil {
			boot.live = src.current.fs
		}
		return e.launchLocked(sb, boot, now), nil
	})
}

func (e *Emulator) handleListSandboxes(rc *reqCtx) {
	e.serveList(rc, []string{"createdAt", "name", "statusUpdatedAt", "currentSnapshotId"}, true, func(sc scope, q listQuery) (any, *apiError) {
		matches := func(sb *sandboxRec) bool {
			status := vercel.SessionStopped
			if sb.current != nil {
				status = sb.current.status
			}
			if q.namePrefix != "" && !strings.HasPrefix(sb.name, q.namePrefix) {
				return false
			}
			if q.status != "" && string(status) != q.status {
				return false
			}
			if v, ok := sb.tags[q.tagKey]; q.hasTag && (!ok || v != q.tagValue) {
				return false
			}
			return true
		}
		var recs []*sandboxRec
		for _, sb := range e.st.sandboxes[sc] {
			if matches(sb) {
				recs = append(recs, sb)
			}
		}
		key := func(sb *sandboxRec) pageItem {
			it := pageItem{seq: sb.seq}
			switch q.sortBy {
			case "name":
				it.str = sb.name
			case "statusUpdatedAt":
				it.num = sb.statusUpdatedAt
			case "currentSnapshotId":
				it.str = sb.currentSnapshotID
			default:
				it.num = sb.createdAt
			}
			return it
		}
		out := vercel.ListSandboxesResponse{}
		out.Sandboxes, out.Pagination = listPage(q, recs, key, e.renderSandbox)
		return out, nil
	})
}
