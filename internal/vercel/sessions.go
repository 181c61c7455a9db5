package vercel

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"time"
)

// sessionPath addresses a session. The SDK interpolates ids raw; escaping is
// a no-op for real ids and keeps a malformed one inside its path segment.
func sessionPath(id string) string { return "/v2/sandboxes/sessions/" + url.PathEscape(id) }

// ListSessionsOptions are the GET /v2/sandboxes/sessions filters
// (docs/dev/vercel-sandbox-api.md §5.7).
type ListSessionsOptions struct {
	// Name restricts the list to one named sandbox's sessions.
	Name string
	// Limit is the page size, 1–50 (server default 20).
	Limit int
	// Cursor is the previous page's Pagination.Next.
	Cursor string
	// SortOrder is asc or desc (default), by creation time.
	SortOrder string
}

// ListSessions returns one page of sessions.
func (c *Client) ListSessions(ctx context.Context, opts ListSessionsOptions) (*ListSessionsResponse, error) {
	q := c.listQuery(opts.Limit, opts.Cursor, opts.SortOrder)
	if opts.Name != "" {
		q.Set("name", opts.Name)
	}
	r, _ := c.jsonRequest(EPListSessions, http.MethodGet, "/v2/sandboxes/sessions", q, nil, retryable)
	var out ListSessionsResponse
	if err := c.do(ctx, r, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ListAllSessions walks every page from opts.Cursor on.
func (c *Client) ListAllSessions(ctx context.Context, opts ListSessionsOptions) ([]Session, error) {
	return walkPages(EPListSessions, opts.Cursor, func(cursor string) ([]Session, *string, error) {
		opts.Cursor = cursor
		page, err := c.ListSessions(ctx, opts)
		if err != nil {
			return nil, nil, err
		}
		return page.Sessions, page.Pagination.Next, nil
	})
}

// GetSession reads a session and its routes. A stopped session still answers
// 200 with its final status (docs/dev/vercel-sandbox-api.md §4).
func (c *Client) GetSession(ctx context.Context, id string) (*SessionResponse, error) {
	if err := checkID(EPGetSession, "session id", id); err != nil {
		return nil, err
	}
	r, _ := c.jsonRequest(EPGetSession, http.MethodGet, sessionPath(id), nil, nil, retryable)
	var out SessionResponse
	if err := c.do(ctx, r, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// StopSession stops a session for good (docs/dev/vercel-sandbox-api.md §5.7); a
// persistent sandbox is snapshotted first and the answer then carries Sandbox
// and Snapshot.
//
// Stop is retried: if a retry finds the session already stopped (410
// sandbox_stopped) after an attempt that may have committed, the session is
// read back and returned without Sandbox/Snapshot.
func (c *Client) StopSession(ctx context.Context, id string) (*StopSessionResponse, error) {
	if err := checkID(EPStopSession, "session id", id); err != nil {
		return nil, err
	}
	r, _ := c.jsonRequest(EPStopSession, http.MethodPost, sessionPath(id)+"/stop", nil, nil, retryable)
	r.alreadyDone = func(e *APIError) bool { return IsSessionStopped(e) }
	r.lane, r.releases = laneFree, true
	var out StopSessionResponse
	err := c.do(ctx, r, &out)
	var done *alreadyDoneError
	if errors.As(err, &done) {
		s, err := c.GetSession(ctx, id)
		if err != nil {
			return nil, err
		}
		return &StopSessionResponse{Session: s.Session}, nil
	}
	if err != nil {
		return nil, err
	}
	return &out, nil
}

// ExtendTimeout adds d (≥ 1 s) to the running session's timeout
// (docs/dev/vercel-sandbox-api.md §5.7). The server answers 400
// sandbox_timeout_invalid beyond the plan maximum. It is sent once: extensions
// add up, so a repeat would extend twice.
func (c *Client) ExtendTimeout(ctx context.Context, id string, d time.Duration) (*Session, error) {
	if err := checkID(EPExtendTimeout, "session id", id); err != nil {
		return nil, err
	}
	r, err := c.jsonRequest(EPExtendTimeout, http.MethodPost, sessionPath(id)+"/extend-timeout", nil,
		ExtendTimeoutRequest{Duration: d.Milliseconds()}, sendOnce)
	if err != nil {
		return nil, err
	}
	// A session whose extension queues behind creates lapses.
	r.lane = laneFree
	var out struct {
		Session Session `json:"session"`
	}
	if err := c.do(ctx, r, &out); err != nil {
		return nil, err
	}
	return &out.Session, nil
}

// UpdateNetworkPolicy replaces the running session's network policy
// (docs/dev/vercel-sandbox-api.md §5.7). The answer's policy lists injected
// header names, never their values.
func (c *Client) UpdateNetworkPolicy(ctx context.Context, id string, p NetworkPolicy) (*Session, error) {
	if err := checkID(EPUpdateNetworkPolicy, "session id", id); err != nil {
		return nil, err
	}
	r, err := c.jsonRequest(EPUpdateNetworkPolicy, http.MethodPost, sessionPath(id)+"/network-policy", nil, p, sendOnce)
	if err != nil {
		return nil, err
	}
	var out struct {
		Session Session `json:"session"`
	}
	if err := c.do(ctx, r, &out); err != nil {
		return nil, err
	}
	return &out.Session, nil
}
