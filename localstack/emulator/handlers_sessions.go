package emulator

import (
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

// liveSessionLocked finds a session for an operation that needs it running:
// a pending session is waited for (PendingOps "queue") or refused (422); a
// stopping/snapshotting one is refused with 422; a dead one with 410
// sandbox_stopped. Called with e.mu held; returns with e.mu held (it is
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
			if err := e.waitUnlocked(rc, s.waitReady(), e.closing); err != nil {
				return nil, err
			}
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

// idleSessionLocked finds a session, in any status, once no stop or snapshot
// of it is in flight. Called with e.mu held; returns with e.mu held.
func (e *Emulator) idleSessionLocked(rc *reqCtx) (*sessionRec, *apiError) {
	for {
		s, err := e.sessionLocked(rc)
		if err != nil || !s.inStop {
			return s, err
		}
		if err := e.waitUnlocked(rc, s.waitDone(), nil); err != nil {
			return nil, err
		}
	}
}

// sessionOnly is the answer of the calls that change a session.
type sessionOnly struct {
	Session vercel.Session `json:"session"`
}

func (e *Emulator) handleGetSession(rc *reqCtx) {
	serve(e, rc, e.sessionLocked, func(s *sessionRec) (any, *apiError) {
		return vercel.SessionResponse{Session: e.renderSession(s), Routes: e.renderRoutes(s)}, nil
	})
}

func (e *Emulator) handleListSessions(rc *reqCtx) {
	name := rc.query("name")
	e.serveList(rc, []string{"createdAt"}, false, func(sc scope, q listQuery) (any, *apiError) {
		var recs []*sessionRec
		if name != "" {
			if sb := e.st.sandbox(sc, name); sb != nil {
				recs = sb.sessions
			}
		} else {
			for _, sb := range e.st.sandboxes[sc] {
				recs = append(recs, sb.sessions...)
			}
		}
		out := vercel.ListSessionsResponse{}
		out.Sessions, out.Pagination = listPage(q, recs,
			func(s *sessionRec) pageItem { return pageItem{num: s.createdAt, seq: s.seq} }, e.renderSession)
		return out, nil
	})
}

func (e *Emulator) handleStopSession(rc *reqCtx) {
	if err := rc.decode(&struct{}{}, true); err != nil {
		rc.fail(err)
		return
	}
	serve(e, rc, e.idleSessionLocked, func(s *sessionRec) (any, *apiError) {
		if s.status.Terminal() {
			if e.opts.SecondStopStatus == http.StatusGone {
				return nil, &apiError{status: 410, code: "sandbox_stopped", message: fmt.Sprintf("Sandbox session %s is already %s.", s.id, s.status)}
			}
			return vercel.StopSessionResponse{Session: e.renderSession(s)}, nil
		}
		j := e.stopLocked(s, stopRequested, e.nowMs(), 0)
		resp := vercel.StopSessionResponse{Session: e.renderSession(s)}
		if j.result != nil {
			sb := e.renderSandbox(s.sb)
			sn := renderSnapshot(j.result)
			resp.Sandbox, resp.Snapshot = &sb, &sn
		}
		return resp, nil
	})
}

func (e *Emulator) handleExtendTimeout(rc *reqCtx) {
	var b extendBody
	if !rc.decodeChecked(&b, false) {
		return
	}
	serve(e, rc, e.liveSessionLocked, func(s *sessionRec) (any, *apiError) {
		limit := durMs(e.plan.MaxSessionDuration)
		if total := s.timeout + *b.Duration; total > limit {
			return nil, &apiError{status: 400, code: "sandbox_timeout_invalid",
				message: fmt.Sprintf("Invalid `duration`: the session timeout would become %d ms, above the maximum of %d ms on the %s plan.", total, limit, e.plan.Name)}
		}
		now := e.nowMs()
		s.timeout += *b.Duration
		s.updatedAt = now
		s.sb.updatedAt = now // its expiresAt moved
		if d := s.deadline(); d > 0 {
			e.st.timers.add(timerItem{at: d, kind: timerTimeout, id: s.id})
		}
		return sessionOnly{e.renderSession(s)}, nil
	})
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
	serve(e, rc, e.liveSessionLocked, func(s *sessionRec) (any, *apiError) {
		s.policy = pol
		s.updatedAt = e.nowMs()
		return sessionOnly{e.renderSession(s)}, nil
	})
}
