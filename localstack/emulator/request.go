package emulator

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"

	"github.com/getsentry/sandbox-controller/internal/vercel"
)

// This file holds what every handler does before and after its own work,
// written once: the request context, strict body decoding, answers, the
// lookups' locking discipline, waiting without the lock, and lists.

// reqCtx is one API request after routing and authentication.
type reqCtx struct {
	e       *Emulator
	w       http.ResponseWriter
	r       *http.Request
	op      string
	version string
	params  map[string]string
	team    string
	oidc    bool
	oidcPrj string
	// cred is the Options.Credentials entry the token matched; nil for
	// Options.Token and OIDC tokens.
	cred *credential
}

func (rc *reqCtx) param(name string) string { return rc.params[name] }

func (rc *reqCtx) query(name string) string { return rc.r.URL.Query().Get(name) }

// project resolves the project of a request from an explicit parameter
// (named field, for the error message) or the OIDC token.
func (rc *reqCtx) project(explicit, field string) (string, *apiError) {
	if rc.oidc {
		if explicit != "" && explicit != rc.oidcPrj {
			return "", &apiError{status: 403, code: "forbidden", message: "The OIDC token is not valid for project " + strconv.Quote(explicit) + "."}
		}
		return rc.oidcPrj, nil
	}
	if explicit == "" {
		return "", badRequest("Invalid request: `%s` is required unless authenticating with an OIDC token.", field)
	}
	if err := rc.e.checkProject(rc, explicit); err != nil {
		return "", err
	}
	return explicit, nil
}

// queryProject resolves the project from a query parameter.
func (rc *reqCtx) queryProject(name string) (scope, *apiError) {
	p, err := rc.project(rc.query(name), name)
	return scope{rc.team, p}, err
}

// visible says whether an object of scope sc may be seen by this request:
// same team, and the same project when the token is a project-scoped OIDC token.
func (rc *reqCtx) visible(sc scope) bool {
	return sc.team == rc.team && (!rc.oidc || sc.project == rc.oidcPrj)
}

const maxJSONBody = 16 << 20

func (rc *reqCtx) readBody() ([]byte, *apiError) {
	b, err := io.ReadAll(http.MaxBytesReader(rc.w, rc.r.Body, maxJSONBody))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, &apiError{status: 413, code: "payload_too_large", message: "Request body too large."}
		}
		return nil, badRequest("Invalid request: could not read body: %v.", err)
	}
	return b, nil
}

// decode reads and strictly decodes the JSON body into dst.
func (rc *reqCtx) decode(dst any, allowEmpty bool) *apiError {
	b, err := rc.readBody()
	if err != nil {
		return err
	}
	return decodeBody(b, dst, allowEmpty)
}

// decodeChecked decodes the JSON body into b and checks it. When either fails
// it answers the error and returns false.
func (rc *reqCtx) decodeChecked(b checkedBody, allowEmpty bool) bool {
	err := rc.decode(b, allowEmpty)
	if err == nil {
		err = b.check()
	}
	if err != nil {
		rc.fail(err)
		return false
	}
	return true
}

func (rc *reqCtx) json(status int, v any) { writeJSON(rc.w, status, v) }

func (rc *reqCtx) fail(err *apiError) { writeError(rc.w, err) }

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		writeError(w, &apiError{status: 500, code: "internal_server_error", message: err.Error()})
		return
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)+1))
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

type rateLimitInfo struct {
	Remaining int64 `json:"remaining"`
	Reset     int64 `json:"reset"`
	ResetMs   int64 `json:"resetMs"`
	Total     int64 `json:"total"`
}

type errorBody struct {
	Code    string         `json:"code"`
	Message string         `json:"message"`
	Limit   *rateLimitInfo `json:"limit,omitempty"`
}

func writeError(w http.ResponseWriter, e *apiError) {
	for k, v := range e.header {
		w.Header().Set(k, v)
	}
	writeJSON(w, e.status, struct {
		Error errorBody `json:"error"`
	}{errorBody{Code: e.code, Message: e.message, Limit: e.limit}})
}

func codeForStatus(status int) string {
	switch status {
	case 400:
		return "bad_request"
	case 401:
		return "unauthorized"
	case 402:
		return "payment_required"
	case 403:
		return "forbidden"
	case 404:
		return "not_found"
	case 409:
		return "conflict"
	case 410:
		return "gone"
	case 422:
		return "unprocessable_entity"
	case 429:
		return "rate_limited"
	}
	return "internal_server_error"
}

// ---- handler steps ----

// created marks a handler's response that is answered 201 instead of 200.
type created struct{ body any }

// answer answers err, or resp with 200 (201 for a created value).
func (rc *reqCtx) answer(resp any, err *apiError) {
	switch {
	case err != nil:
		rc.fail(err)
	case resp == nil:
		rc.json(http.StatusOK, struct{}{})
	default:
		if c, ok := resp.(created); ok {
			rc.json(http.StatusCreated, c.body)
			return
		}
		rc.json(http.StatusOK, resp)
	}
}

// finder finds the object a request's path names (a session, a command, a
// snapshot, a named sandbox) in the request's scope. It runs with e.mu held and
// may release it while waiting, but returns with it held.
type finder[T any] func(*reqCtx) (T, *apiError)

// withLocked finds the object of the request and runs fn on it, both with e.mu
// held, and returns the first error. The lock is released (and the files queued
// for removal deleted) before it returns. For handlers that go on without the
// lock: streaming, file transfers, signals.
func withLocked[T any](e *Emulator, rc *reqCtx, find finder[T], fn func(T) *apiError) *apiError {
	e.mu.Lock()
	defer e.unlock()
	obj, err := find(rc)
	if err != nil {
		return err
	}
	return fn(obj)
}

// answerLocked builds a response with e.mu held and answers it (or the error)
// once the lock is released.
func (e *Emulator) answerLocked(rc *reqCtx, fn func() (any, *apiError)) {
	resp, err := func() (any, *apiError) {
		e.mu.Lock()
		defer e.unlock()
		return fn()
	}()
	rc.answer(resp, err)
}

// serve is the whole of most handlers: find the object of the request, build
// the response from it with e.mu held, and answer it (or the first error).
func serve[T any](e *Emulator, rc *reqCtx, find finder[T], fn func(T) (any, *apiError)) {
	e.answerLocked(rc, func() (any, *apiError) {
		obj, err := find(rc)
		if err != nil {
			return nil, err
		}
		return fn(obj)
	})
}

// waitUnlocked releases e.mu until ch is closed, then takes it again. It gives up
// with 499 when the client goes away, and with 503 when giveUp (if not nil) is
// closed first.
func (e *Emulator) waitUnlocked(rc *reqCtx, ch, giveUp <-chan struct{}) *apiError {
	e.unlock()
	defer e.mu.Lock()
	select {
	case <-ch:
		return nil
	case <-rc.r.Context().Done():
		return &apiError{status: 499, code: "client_closed_request", message: "The client went away."}
	case <-giveUp:
		return &apiError{status: 503, code: "service_unavailable", message: "The emulator is shutting down."}
	}
}

// serveList answers a list request: the project from ?project and the list
// query (sortBys: the allowed sortBy values, the first the default; filters:
// the GET /v2/sandboxes filters) are checked before fn builds the response with
// e.mu held.
func (e *Emulator) serveList(rc *reqCtx, sortBys []string, filters bool, fn func(scope, listQuery) (any, *apiError)) {
	sc, err := rc.queryProject("project")
	if err != nil {
		rc.fail(err)
		return
	}
	q, err := parseListQuery(rc.r.URL.Query(), sortBys, filters)
	if err != nil {
		rc.fail(err)
		return
	}
	e.answerLocked(rc, func() (any, *apiError) { return fn(sc, q) })
}

// listPage sorts recs by key (whose idx is ignored), cuts the page q asks for
// and renders it.
func listPage[T, R any](q listQuery, recs []T, key func(T) pageItem, render func(T) R) ([]R, vercel.Pagination) {
	items := make([]pageItem, len(recs))
	for i, r := range recs {
		items[i] = key(r)
		items[i].idx = i
	}
	page, pg := paginate(items, q)
	out := make([]R, 0, len(page))
	for _, i := range page {
		out = append(out, render(recs[i]))
	}
	return out, pg
}
