package emulator

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"

	"github.com/getsentry/sandbox-controller/internal/vercel"
)

func sessionNotFound(id string) *apiError { return notFound("Session %s not found.", id) }

// sessionLocked finds a session visible to the request, in any status.
func (e *Emulator) sessionLocked(rc *reqCtx) (*sessionRec, *apiError) {
	id := rc.param("sid")
	s := e.st.sessions[id]
	if s == nil || !rc.visible(s.sb.scope) {
		return nil, sessionNotFound(id)
	}
	return s, nil
}

// liveSessionLocked finds a session for an operation that needs it running
// (§9.7): a pending session is waited for (PendingOps "queue") or refused
// (422); a stopping/snapshotting one is refused with 422; a dead one with
// 410 sandbox_stopped. Called with e.mu held; returns with e.mu held (it is
// released while waiting).
func (e *Emulator) liveSessionLocked(rc *reqCtx) (*sessionRec, *apiError) {
	for {
		s, err := e.sessionLocked(rc)
		if err != nil {
			return nil, err
		}
		switch {
		case s.status == vercel.SessionRunning && !s.inStop:
			return s, nil
		case s.status == vercel.SessionPending && !s.inStop:
			if e.opts.PendingOps == "reject" {
				return nil, &apiError{status: 422, code: "sandbox_pending",
					message: fmt.Sprintf("Sandbox session %s is still starting (status pending); retry when it is running.", s.id)}
			}
			ch := s.waitReady()
			e.unlock()
			select {
			case <-ch:
			case <-rc.r.Context().Done():
				e.mu.Lock()
				return nil, &apiError{status: 499, code: "client_closed_request", message: "The client went away."}
			case <-e.closing:
				e.mu.Lock()
				return nil, &apiError{status: 503, code: "service_unavailable", message: "The emulator is shutting down."}
			}
			e.mu.Lock()
		case s.status == vercel.SessionStopping:
			return nil, &apiError{status: 422, code: "sandbox_stopping",
				message: fmt.Sprintf("Sandbox session %s is stopping and no longer accepts operations.", s.id)}
		case s.status == vercel.SessionSnapshotting:
			return nil, &apiError{status: 422, code: "sandbox_snapshotting",
				message: fmt.Sprintf("Sandbox session %s is being snapshotted and no longer accepts operations.", s.id)}
		default:
			return nil, &apiError{status: 410, code: "sandbox_stopped",
				message: fmt.Sprintf("Sandbox session %s is %s and no longer available.", s.id, s.status)}
		}
	}
}

func (e *Emulator) handleGetSession(rc *reqCtx) {
	e.mu.Lock()
	s, err := e.sessionLocked(rc)
	if err != nil {
		e.unlock()
		rc.fail(err)
		return
	}
	resp := vercel.SessionResponse{Session: e.renderSession(s), Routes: e.renderRoutes(s)}
	e.unlock()
	rc.json(http.StatusOK, resp)
}

func (e *Emulator) handleListSessions(rc *reqCtx) {
	sc, err := rc.queryProject("project")
	if err != nil {
		rc.fail(err)
		return
	}
	q, err := parseListQuery(rc.r.URL.Query(), []string{"createdAt"}, false)
	if err != nil {
		rc.fail(err)
		return
	}
	name := rc.query("name")
	e.mu.Lock()
	var items []pageItem
	var recs []*sessionRec
	add := func(sb *sandboxRec) {
		for _, s := range sb.sessions {
			items = append(items, pageItem{num: s.createdAt, seq: s.seq, idx: len(recs)})
			recs = append(recs, s)
		}
	}
	if name != "" {
		if sb := e.st.sandbox(sc, name); sb != nil {
			add(sb)
		}
	} else {
		for _, sb := range e.st.sandboxes[sc] {
			add(sb)
		}
	}
	page, pg := paginate(items, q)
	out := vercel.ListSessionsResponse{Sessions: make([]vercel.Session, 0, len(page)), Pagination: pg}
	for _, i := range page {
		out.Sessions = append(out.Sessions, e.renderSession(recs[i]))
	}
	e.unlock()
	rc.json(http.StatusOK, out)
}

func (e *Emulator) handleStopSession(rc *reqCtx) {
	if err := rc.decode(&struct{}{}, true); err != nil {
		rc.fail(err)
		return
	}
	e.mu.Lock()
	for {
		s, err := e.sessionLocked(rc)
		if err != nil {
			e.unlock()
			rc.fail(err)
			return
		}
		if s.inStop {
			ch := s.waitDone()
			e.unlock()
			select {
			case <-ch:
			case <-rc.r.Context().Done():
				return
			}
			e.mu.Lock()
			continue
		}
		if s.status.Terminal() {
			if e.opts.SecondStopStatus == http.StatusGone {
				e.unlock()
				rc.fail(&apiError{status: 410, code: "sandbox_stopped", message: fmt.Sprintf("Sandbox session %s is already %s.", s.id, s.status)})
				return
			}
			resp := vercel.StopSessionResponse{Session: e.renderSession(s)}
			e.unlock()
			rc.json(http.StatusOK, resp)
			return
		}
		j := e.stopLocked(s, stopRequested, e.nowMs(), 0)
		resp := vercel.StopSessionResponse{Session: e.renderSession(s)}
		if j.result != nil {
			sb := e.renderSandbox(s.sb)
			sn := renderSnapshot(j.result)
			resp.Sandbox, resp.Snapshot = &sb, &sn
		}
		e.unlock()
		rc.json(http.StatusOK, resp)
		return
	}
}

func (e *Emulator) handleExtendTimeout(rc *reqCtx) {
	var b extendBody
	if err := rc.decode(&b, false); err != nil {
		rc.fail(err)
		return
	}
	if b.Duration == nil {
		rc.fail(invalid("duration", "is required: should have required property 'duration'"))
		return
	}
	if *b.Duration < 1000 {
		rc.fail(invalid("duration", "should be >= 1000"))
		return
	}
	e.mu.Lock()
	s, err := e.liveSessionLocked(rc)
	if err != nil {
		e.unlock()
		rc.fail(err)
		return
	}
	limit := durMs(e.plan.MaxSessionDuration)
	if total := s.timeout + *b.Duration; total > limit {
		e.unlock()
		rc.fail(&apiError{status: 400, code: "sandbox_timeout_invalid",
			message: fmt.Sprintf("Invalid `duration`: the session timeout would become %d ms, above the maximum of %d ms on the %s plan.", total, limit, e.plan.Name)})
		return
	}
	now := e.nowMs()
	s.timeout += *b.Duration
	s.updatedAt = now
	s.sb.updatedAt = now // its expiresAt moved
	if d := s.deadline(); d > 0 {
		e.st.timers.add(timerItem{at: d, kind: timerTimeout, id: s.id})
	}
	resp := struct {
		Session vercel.Session `json:"session"`
	}{e.renderSession(s)}
	e.unlock()
	rc.json(http.StatusOK, resp)
}

func (e *Emulator) handleNetworkPolicy(rc *reqCtx) {
	body, err := rc.readBody()
	if err != nil {
		rc.fail(err)
		return
	}
	if len(body) == 0 || body[0] != '{' {
		rc.fail(badRequest("Invalid request: body should be a network policy object."))
		return
	}
	pol, err := parsePolicy(body)
	if err != nil {
		rc.fail(err)
		return
	}
	e.mu.Lock()
	s, err := e.liveSessionLocked(rc)
	if err != nil {
		e.unlock()
		rc.fail(err)
		return
	}
	s.policy = pol
	s.updatedAt = e.nowMs()
	resp := struct {
		Session vercel.Session `json:"session"`
	}{e.renderSession(s)}
	e.unlock()
	rc.json(http.StatusOK, resp)
}

func (e *Emulator) handleInteractive(rc *reqCtx) {
	if err := rc.decode(&struct{}{}, true); err != nil {
		rc.fail(err)
		return
	}
	e.mu.Lock()
	s, err := e.liveSessionLocked(rc)
	if err != nil {
		e.unlock()
		rc.fail(err)
		return
	}
	id := s.id
	e.unlock()
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	host := rc.r.Host
	if host == "" {
		host = "127.0.0.1"
	}
	// The emulator has no interactive shell; the URL is a placeholder (as in
	// Vercel's own mock).
	rc.json(http.StatusOK, map[string]string{
		"url":   "ws://" + host + "/_emulator/interactive/" + id,
		"token": hex.EncodeToString(b),
	})
}
