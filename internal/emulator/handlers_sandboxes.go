package emulator

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
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

// configFromBody applies the fields of a create/fork body to sb (which holds
// the defaults, or the fork source's copied configuration). The body has
// been validated.
func (e *Emulator) configFromBody(sb *sandboxRec, b *createBody, kind routeKind) {
	if b.Resources != nil {
		sb.vcpus, sb.memory, _ = e.checkResources(b.Resources, sb.vcpus)
	}
	if b.Timeout != nil {
		sb.timeout = *b.Timeout
	}
	if b.Persistent != nil {
		sb.persistent = *b.Persistent
	}
	if b.Runtime != nil {
		sb.runtime = *b.Runtime
	}
	if b.Image != nil {
		sb.image = pinImage(*b.Image)
		sb.runtime = ""
	}
	if b.Architecture != nil {
		sb.architecture = *b.Architecture
	}
	if b.Region != nil {
		sb.region = *b.Region
	}
	if b.FailoverRegions != nil {
		sb.failover = slices.Clone(b.FailoverRegions)
		if len(sb.failover) == 0 {
			sb.failover = nil
		}
	}
	if b.NetworkID != nil {
		sb.networkID = *b.NetworkID
	}
	if len(b.NetworkPolicy) > 0 && !isNull(b.NetworkPolicy) {
		sb.policy, _ = parsePolicy(b.NetworkPolicy)
	}
	if b.Env != nil {
		sb.env = b.Env
	}
	if b.Ports != nil {
		sb.ports = slices.Clone(b.Ports)
	}
	if b.Tags != nil {
		sb.tags = b.Tags
		if len(sb.tags) == 0 {
			sb.tags = nil
		}
	}
	if b.SnapshotExpiration != nil {
		v := *b.SnapshotExpiration
		sb.snapExp = &v
	}
	keepNull := isNull(b.KeepLastSnapshots)
	if len(b.KeepLastSnapshots) > 0 && !keepNull {
		sb.keepLast, _ = parseKeepLast(b.KeepLastSnapshots)
	} else if keepNull {
		sb.keepLast = nil
	}
	// /v4 create and /v3 fork: snapshots expire after 7 days and persistent
	// sandboxes keep only their latest snapshot unless told otherwise.
	if kind == routeCreateV4 || kind == routeForkV3 {
		if sb.snapExp == nil {
			v := sevenDaysMs
			sb.snapExp = &v
		}
		if sb.persistent && sb.keepLast == nil && !keepNull {
			t := true
			sb.keepLast = &vercel.KeepLastSnapshots{Count: 1, DeleteEvicted: &t}
		}
	}
}

func (e *Emulator) duplicateName(name string) *apiError {
	return &apiError{status: e.opts.DuplicateNameStatus, code: codeForStatus(e.opts.DuplicateNameStatus),
		message: fmt.Sprintf("A sandbox named %q already exists in this project. Use `GET /v2/sandboxes/%s` to retrieve it.", name, name)}
}

func sandboxNotFound(name string) *apiError {
	return notFound("Sandbox %q not found.", name)
}

// uniqueNameLocked returns the requested name or a fresh generated one.
func (e *Emulator) uniqueNameLocked(sc scope, b *createBody) (string, *apiError) {
	if b.Name != nil {
		if e.st.sandbox(sc, *b.Name) != nil {
			return "", e.duplicateName(*b.Name)
		}
		return *b.Name, nil
	}
	for {
		n := newSandboxName()
		if e.st.sandbox(sc, n) == nil {
			return n, nil
		}
	}
}

func (e *Emulator) registerSandboxLocked(sb *sandboxRec) {
	m := e.st.sandboxes[sb.scope]
	if m == nil {
		m = map[string]*sandboxRec{}
		e.st.sandboxes[sb.scope] = m
	}
	m[sb.name] = sb
}

// finishStart completes a session start: boots it without the lock when
// needed, then renders the answer. Called and returns with e.mu held.
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

	e.mu.Lock()
	now := e.nowMs()
	name, err := e.uniqueNameLocked(sc, &b)
	if err == nil {
		err = e.checkConcurrency(sc.team)
	}
	var boot bootSpec
	if err == nil && b.Source != nil {
		src, _ := checkSource(b.Source)
		if src.Type == vercel.SourceSnapshot {
			boot.snap, err = e.usableSnapshotLocked(src.SnapshotID, rc, now)
			if err == nil && b.Region != nil && *b.Region != boot.snap.region && !slices.Contains(b.FailoverRegions, boot.snap.region) {
				err = &apiError{status: 400, code: "snapshot_region_mismatch",
					message: fmt.Sprintf("Snapshot %s is only available in %s, not in %s.", boot.snap.id, boot.snap.region, *b.Region)}
			}
		} else {
			boot.source = src
		}
	}
	if err != nil {
		e.unlock()
		rc.fail(err)
		return
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
	if boot.source != nil {
		sb.source = boot.source
	}
	e.registerSandboxLocked(sb)
	s := e.startSessionLocked(sb, boot, now)
	e.bootIfNeeded(s, boot)
	sess := e.renderSession(s)
	resp := vercel.SandboxResponse{Sandbox: e.renderSandbox(sb), Session: &sess, Routes: e.renderRoutes(s)}
	e.unlock()
	rc.json(http.StatusOK, resp)
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

// resumeLocked starts a new session from the sandbox's current snapshot when
// its current session is not running. It reports whether it resumed.
func (e *Emulator) resumeLocked(rc *reqCtx, sb *sandboxRec) (bool, *apiError) {
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

func truthy(v string) bool { return v == "true" || v == "1" }

func (e *Emulator) handleGetSandbox(rc *reqCtx) {
	resume := truthy(rc.query("resume"))
	e.mu.Lock()
	sb, err := e.lookupSandboxLocked(rc)
	resumed := false
	if err == nil && resume {
		resumed, err = e.resumeLocked(rc, sb)
	}
	if err != nil {
		e.unlock()
		rc.fail(err)
		return
	}
	resp := sandboxAndSession{Sandbox: e.renderSandbox(sb), Routes: []vercel.Route{}, Resumed: resumed}
	if sb.current != nil {
		sess := e.renderSession(sb.current)
		resp.Session = &sess
		resp.Routes = e.renderRoutes(sb.current)
	}
	e.unlock()
	rc.json(http.StatusOK, resp)
}

func (e *Emulator) handleUpdateSandbox(rc *reqCtx) {
	var b updateBody
	if err := rc.decode(&b, true); err != nil {
		rc.fail(err)
		return
	}
	resume := truthy(rc.query("resume"))
	e.mu.Lock()
	sb, err := e.lookupSandboxLocked(rc)
	if err == nil {
		err = e.validateUpdate(&b, sb)
	}
	now := e.nowMs()
	if err == nil && b.CurrentSnapshotID != nil {
		sn := e.st.snapshots[*b.CurrentSnapshotID]
		if sn == nil || sn.scope != sb.scope || !sn.usable(now) {
			err = invalid("currentSnapshotId", "must reference an active snapshot of this project")
		}
	}
	if err != nil {
		e.unlock()
		rc.fail(err)
		return
	}
	if b.Resources != nil {
		sb.vcpus, sb.memory, _ = e.checkResources(b.Resources, sb.vcpus)
	}
	if b.Runtime != nil {
		sb.runtime = *b.Runtime
	}
	if b.Timeout != nil {
		sb.timeout = *b.Timeout
	}
	if b.Persistent != nil {
		sb.persistent = *b.Persistent
	}
	if b.SnapshotExpiration != nil {
		v := *b.SnapshotExpiration
		sb.snapExp = &v
	}
	if isNull(b.KeepLastSnapshots) {
		sb.keepLast = nil
	} else if len(b.KeepLastSnapshots) > 0 {
		sb.keepLast, _ = parseKeepLast(b.KeepLastSnapshots)
		e.applyKeepLastLocked(sb, now)
	}
	if len(b.NetworkPolicy) > 0 {
		sb.policy, _ = parsePolicy(b.NetworkPolicy) // null → default (allow-all)
	}
	if b.Region != nil {
		sb.region = *b.Region
	}
	if b.FailoverRegions != nil {
		sb.failover = slices.Clone(b.FailoverRegions)
		if len(sb.failover) == 0 {
			sb.failover = nil
		}
	}
	if isNull(b.NetworkID) {
		sb.networkID = ""
	} else if len(b.NetworkID) > 0 {
		_ = json.Unmarshal(b.NetworkID, &sb.networkID)
	}
	if b.Env != nil {
		sb.env = b.Env
	}
	if b.Ports != nil {
		sb.ports = slices.Clone(b.Ports)
	}
	if b.CurrentSnapshotID != nil {
		sb.currentSnapshotID = *b.CurrentSnapshotID
	}
	if b.Tags != nil {
		sb.tags = maps.Clone(b.Tags)
		if len(sb.tags) == 0 {
			sb.tags = nil
		}
	}
	sb.updatedAt = now
	resumed := false
	if resume {
		if resumed, err = e.resumeLocked(rc, sb); err != nil {
			e.unlock()
			rc.fail(err)
			return
		}
	}
	routes := []vercel.Route{}
	if sb.current != nil {
		routes = e.renderRoutes(sb.current)
	}
	if !resume {
		resp := vercel.SandboxResponse{Sandbox: e.renderSandbox(sb), Routes: routes}
		e.unlock()
		rc.json(http.StatusOK, resp)
		return
	}
	resp := sandboxAndSession{Sandbox: e.renderSandbox(sb), Routes: routes, Resumed: resumed}
	if sb.current != nil {
		sess := e.renderSession(sb.current)
		resp.Session = &sess
	}
	e.unlock()
	rc.json(http.StatusOK, resp)
}

func (e *Emulator) handleDeleteSandbox(rc *reqCtx) {
	deleteOrphans := truthy(rc.query("deleteOrphanSnapshots"))
	e.mu.Lock()
	var sb *sandboxRec
	for {
		var err *apiError
		sb, err = e.lookupSandboxLocked(rc)
		if err != nil {
			e.unlock()
			rc.fail(err)
			return
		}
		// Wait for stops and snapshots in flight, then stop what still runs.
		var busy *sessionRec
		for _, s := range sb.sessions {
			if s.inStop {
				busy = s
				break
			}
		}
		if busy != nil {
			ch := busy.waitDone()
			e.unlock()
			select {
			case <-ch:
			case <-rc.r.Context().Done():
				return
			}
			e.mu.Lock()
			continue
		}
		var live *sessionRec
		for _, s := range sb.sessions {
			if !s.status.Terminal() {
				live = s
				break
			}
		}
		if live == nil {
			break
		}
		e.stopLocked(live, stopDelete, e.nowMs(), 0)
	}
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
	resp := struct {
		Sandbox vercel.Sandbox `json:"sandbox"`
	}{e.renderSandbox(sb)}
	e.unlock()
	rc.json(http.StatusOK, resp)
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
	e.mu.Lock()
	src, err := e.lookupSandboxLocked(rc)
	if err == nil {
		err = e.validateCreate(&b, kind, src)
	}
	if err == nil && b.ProjectID != nil && *b.ProjectID != src.scope.project {
		err = invalid("projectId", "must be the project of the source sandbox (%s)", src.scope.project)
	}
	var name string
	if err == nil {
		name, err = e.uniqueNameLocked(src.scope, &b)
	}
	if err == nil {
		err = e.checkConcurrency(src.scope.team)
	}
	if err != nil {
		e.unlock()
		rc.fail(err)
		return
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
	e.registerSandboxLocked(sb)
	s := e.startSessionLocked(sb, boot, now)
	e.bootIfNeeded(s, boot)
	sess := e.renderSession(s)
	resp := vercel.SandboxResponse{Sandbox: e.renderSandbox(sb), Session: &sess, Routes: e.renderRoutes(s)}
	e.unlock()
	rc.json(http.StatusOK, resp)
}

func (e *Emulator) handleListSandboxes(rc *reqCtx) {
	sc, err := rc.queryProject("project")
	if err != nil {
		rc.fail(err)
		return
	}
	q, err := parseListQuery(rc.r.URL.Query(), []string{"createdAt", "name", "statusUpdatedAt", "currentSnapshotId"}, true)
	if err != nil {
		rc.fail(err)
		return
	}
	e.mu.Lock()
	var items []pageItem
	var recs []*sandboxRec
	for _, sb := range e.st.sandboxes[sc] {
		if q.namePrefix != "" && !strings.HasPrefix(sb.name, q.namePrefix) {
			continue
		}
		status := vercel.SessionStopped
		if sb.current != nil {
			status = sb.current.status
		}
		if q.status != "" && string(status) != q.status {
			continue
		}
		if q.hasTag {
			if v, ok := sb.tags[q.tagKey]; !ok || v != q.tagValue {
				continue
			}
		}
		it := pageItem{seq: sb.seq, idx: len(recs)}
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
		items = append(items, it)
		recs = append(recs, sb)
	}
	page, pg := paginate(items, q)
	out := vercel.ListSandboxesResponse{Sandboxes: make([]vercel.Sandbox, 0, len(page)), Pagination: pg}
	for _, i := range page {
		out.Sandboxes = append(out.Sandboxes, e.renderSandbox(recs[i]))
	}
	e.unlock()
	rc.json(http.StatusOK, out)
}
