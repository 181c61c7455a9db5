package vercel

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
)

// Endpoint names: stable, low-cardinality labels for errors, hooks and
// metrics. One per API operation.
const (
	EPCreateSandbox       = "createSandbox"
	EPGetSandbox          = "getSandbox"
	EPListSandboxes       = "listSandboxes"
	EPUpdateSandbox       = "updateSandbox"
	EPDeleteSandbox       = "deleteSandbox"
	EPForkSandbox         = "forkSandbox"
	EPListSessions        = "listSessions"
	EPGetSession          = "getSession"
	EPStopSession         = "stopSession"
	EPExtendTimeout       = "extendTimeout"
	EPUpdateNetworkPolicy = "updateNetworkPolicy"
	EPRunCommand          = "runCommand"
	EPListCommands        = "listCommands"
	EPGetCommand          = "getCommand"
	EPKillCommand         = "killCommand"
	EPCommandLogs         = "commandLogs"
	EPWriteFiles          = "writeFiles"
	EPReadFile            = "readFile"
	EPMkdir               = "mkdir"
	EPCreateSnapshot      = "createSnapshot"
	EPGetSnapshot         = "getSnapshot"
	EPListSnapshots       = "listSnapshots"
	EPDeleteSnapshot      = "deleteSnapshot"
)

// checkID refuses empty and dot-segment path parameters: an empty name would
// turn DELETE /v2/sandboxes/{name} into a request on the collection, and "."
// or ".." could be normalised into another resource by a proxy.
func checkID(endpoint, what, id string) error {
	if id == "" || id == "." || id == ".." {
		return fmt.Errorf("vercel %s: invalid %s %q", endpoint, what, id)
	}
	return nil
}

// sandboxPath escapes the name like the SDK's encodeURIComponent
// (docs/dev/vercel-sandbox-api.md §9b).
func sandboxPath(name string) string { return "/v2/sandboxes/" + url.PathEscape(name) }

// projectQuery scopes name-addressed calls
// (docs/dev/vercel-sandbox-api.md §2.3: projectId query).
func (c *Client) projectQuery() url.Values {
	q := url.Values{}
	if c.projectID != "" {
		q.Set("projectId", c.projectID)
	}
	return q
}

// listQuery scopes list calls (docs/dev/vercel-sandbox-api.md §2.3: project
// query).
func (c *Client) listQuery(limit int, cursor, sortOrder string) url.Values {
	q := url.Values{}
	if c.projectID != "" {
		q.Set("project", c.projectID)
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	if cursor != "" {
		q.Set("cursor", cursor)
	}
	if sortOrder != "" {
		q.Set("sortOrder", sortOrder)
	}
	return q
}

// CreateSandbox creates a named sandbox and its first session: POST
// /v3/sandboxes, or /v2/sandboxes when req.Runtime is set (only /v2 accepts a
// runtime, docs/dev/vercel-sandbox-api.md §5.1). An empty req.ProjectID is
// filled from the Config.
//
// Without a name the request is sent once: a retry after a lost answer would
// create a second sandbox. With a name it is retried on 5xx, connection
// errors and short 429s; if a retry is answered "name already exists", the
// earlier attempt created it, and the sandbox is read back and returned. A
// duplicate name on the first attempt is returned as an error (IsConflict).
func (c *Client) CreateSandbox(ctx context.Context, req CreateSandboxRequest) (*SandboxResponse, error) {
	if req.ProjectID == "" {
		req.ProjectID = c.projectID
	}
	path := "/v3/sandboxes"
	if req.Runtime != "" {
		path = "/v2/sandboxes"
	}
	r, err := c.jsonRequest(EPCreateSandbox, http.MethodPost, path, nil, req, sendOnce)
	if err != nil {
		return nil, err
	}
	r.lane = laneStart
	if req.Name != "" {
		r.retry = retryable
		r.alreadyDone = isDuplicateName
	}
	var out SandboxResponse
	err = c.do(ctx, r, &out)
	var done *alreadyDoneError
	if errors.As(err, &done) {
		return c.GetSandbox(ctx, req.Name, false)
	}
	if err != nil {
		return nil, err
	}
	return &out, nil
}

// GetSandbox reads a named sandbox and its current session. With resume, a
// sandbox whose session is not running gets a new session from its latest
// snapshot (410 snapshot_not_found if there is none,
// docs/dev/vercel-sandbox-api.md §5.2).
func (c *Client) GetSandbox(ctx context.Context, name string, resume bool) (*SandboxResponse, error) {
	if err := checkID(EPGetSandbox, "sandbox name", name); err != nil {
		return nil, err
	}
	q := c.projectQuery()
	if resume {
		q.Set("resume", "true")
	}
	// Retrying a resume is safe: a second resume finds the session running.
	r, _ := c.jsonRequest(EPGetSandbox, http.MethodGet, sandboxPath(name), q, nil, retryable)
	if resume {
		r.lane = laneStart
	}
	var out SandboxResponse
	if err := c.do(ctx, r, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// UpdateSandbox changes a sandbox's settings for future sessions (PATCH,
// docs/dev/vercel-sandbox-api.md §5.4); with resume it also starts a session if
// none is running. It is sent once: with resume, a repeat could start a session
// the caller did not see.
func (c *Client) UpdateSandbox(ctx context.Context, name string, req UpdateSandboxRequest, resume bool) (*SandboxResponse, error) {
	if err := checkID(EPUpdateSandbox, "sandbox name", name); err != nil {
		return nil, err
	}
	q := c.projectQuery()
	if resume {
		q.Set("resume", "true")
	}
	r, err := c.jsonRequest(EPUpdateSandbox, http.MethodPatch, sandboxPath(name), q, req, sendOnce)
	if err != nil {
		return nil, err
	}
	if resume {
		r.lane = laneStart
	}
	var out SandboxResponse
	if err := c.do(ctx, r, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// DeleteSandbox stops and deletes a named sandbox
// (docs/dev/vercel-sandbox-api.md §5.5). Its snapshots survive unless
// deleteOrphanSnapshots. A retry after a lost answer may see 404: callers treat
// IsNotFound from a delete as "deleted". It returns a 404 only once the project
// is verified (VerifyProject): with a wrong project id every delete answers
// 404, and the error then says the project is not found instead.
func (c *Client) DeleteSandbox(ctx context.Context, name string, deleteOrphanSnapshots bool) (*Sandbox, error) {
	if err := checkID(EPDeleteSandbox, "sandbox name", name); err != nil {
		return nil, err
	}
	q := c.projectQuery()
	if deleteOrphanSnapshots {
		q.Set("deleteOrphanSnapshots", "true")
	}
	r, _ := c.jsonRequest(EPDeleteSandbox, http.MethodDelete, sandboxPath(name), q, nil, retryable)
	r.lane, r.releases = laneFree, true
	var out struct {
		Sandbox Sandbox `json:"sandbox"`
	}
	if err := c.do(ctx, r, &out); err != nil {
		if IsNotFound(err) {
			// A wrong project id makes every delete 404 too.
			return nil, c.confirmNotFound(ctx, err)
		}
		return nil, err
	}
	return &out.Sandbox, nil
}

// ForkSandbox creates a new sandbox from another's current snapshot
// (docs/dev/vercel-sandbox-api.md §5.6). It is never re-sent: a lost answer is
// recovered by the caller with GetSandbox on the fork's name.
func (c *Client) ForkSandbox(ctx context.Context, name string, req ForkSandboxRequest) (*SandboxResponse, error) {
	if err := checkID(EPForkSandbox, "sandbox name", name); err != nil {
		return nil, err
	}
	r, err := c.jsonRequest(EPForkSandbox, http.MethodPost, sandboxPath(name)+"/fork", c.projectQuery(), req, sendOnce)
	if err != nil {
		return nil, err
	}
	r.lane = laneStart
	var out SandboxResponse
	if err := c.do(ctx, r, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ListSandboxesOptions are the GET /v2/sandboxes filters
// (docs/dev/vercel-sandbox-api.md §5.3). Zero values are not sent, so the
// server defaults apply.
type ListSandboxesOptions struct {
	// Limit is the page size, 1–50 (server default 20).
	Limit int
	// Cursor is the previous page's Pagination.Next.
	Cursor string
	// SortBy is createdAt (default), name, statusUpdatedAt or currentSnapshotId.
	SortBy string
	// SortOrder is asc or desc (default).
	SortOrder string
	// NamePrefix needs SortBy "name".
	NamePrefix string
	// Status (running, stopping, stopped) needs SortBy "createdAt".
	Status string
	// Tag filters on one "key:value" pair; the API supports only one.
	Tag string
}

// ListSandboxes returns one page of named sandboxes.
func (c *Client) ListSandboxes(ctx context.Context, opts ListSandboxesOptions) (*ListSandboxesResponse, error) {
	q := c.listQuery(opts.Limit, opts.Cursor, opts.SortOrder)
	for k, v := range map[string]string{"sortBy": opts.SortBy, "namePrefix": opts.NamePrefix, "status": opts.Status, "tags": opts.Tag} {
		if v != "" {
			q.Set(k, v)
		}
	}
	r, _ := c.jsonRequest(EPListSandboxes, http.MethodGet, "/v2/sandboxes", q, nil, retryable)
	var out ListSandboxesResponse
	if err := c.do(ctx, r, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ListAllSandboxes walks every page from opts.Cursor on and returns all
// sandboxes.
func (c *Client) ListAllSandboxes(ctx context.Context, opts ListSandboxesOptions) ([]Sandbox, error) {
	return walkPages(EPListSandboxes, opts.Cursor, func(cursor string) ([]Sandbox, *string, error) {
		opts.Cursor = cursor
		page, err := c.ListSandboxes(ctx, opts)
		if err != nil {
			return nil, nil, err
		}
		return page.Sandboxes, page.Pagination.Next, nil
	})
}

// maxPages stops a walk over a server whose cursors never end (50 items a
// page × 10 000 pages is far beyond any plan's limits).
const maxPages = 10000

// walkPages follows pagination.next until it is null or empty, refusing a
// cursor it has already seen so a server bug cannot loop forever.
func walkPages[T any](endpoint, cursor string, fetch func(cursor string) ([]T, *string, error)) ([]T, error) {
	var all []T
	seen := map[string]bool{}
	for range maxPages {
		items, next, err := fetch(cursor)
		if err != nil {
			return all, err
		}
		all = append(all, items...)
		if next == nil || *next == "" {
			return all, nil
		}
		if seen[*next] {
			return all, &ProtocolError{Endpoint: endpoint, Message: fmt.Sprintf("pagination cursor %q repeated", *next)}
		}
		seen[*next] = true
		cursor = *next
	}
	return all, &ProtocolError{Endpoint: endpoint, Message: "more than 10000 pages"}
}
