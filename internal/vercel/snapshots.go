package vercel

import (
	"context"
	"net/http"
	"net/url"
	"time"
)

func snapshotPath(id string) string { return "/v2/sandboxes/snapshots/" + url.PathEscape(id) }

// CreateSnapshot captures the session's filesystem; the session stops
// afterwards (docs/dev/vercel-sandbox-api.md §5.10). expiration nil sends no
// body (the sandbox's default applies); 0 means never expire. It is sent once:
// a repeat would fail on the stopped session or, worse, capture twice.
func (c *Client) CreateSnapshot(ctx context.Context, sessionID string, expiration *time.Duration) (*SnapshotResponse, error) {
	if err := checkID(EPCreateSnapshot, "session id", sessionID); err != nil {
		return nil, err
	}
	var body any
	if expiration != nil {
		ms := expiration.Milliseconds()
		body = CreateSnapshotRequest{Expiration: &ms}
	}
	r, err := c.jsonRequest(EPCreateSnapshot, http.MethodPost, sessionPath(sessionID)+"/snapshot", nil, body, sendOnce)
	if err != nil {
		return nil, err
	}
	var out SnapshotResponse
	if err := c.do(ctx, r, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// GetSnapshot reads a snapshot. A deleted one may answer 200 with status
// "deleted" or 404, depending on the server
// (docs/dev/vercel-sandbox-api.md §5.10).
func (c *Client) GetSnapshot(ctx context.Context, id string) (*Snapshot, error) {
	if err := checkID(EPGetSnapshot, "snapshot id", id); err != nil {
		return nil, err
	}
	r, _ := c.jsonRequest(EPGetSnapshot, http.MethodGet, snapshotPath(id), nil, nil, retryable)
	var out SnapshotResponse
	if err := c.do(ctx, r, &out); err != nil {
		return nil, err
	}
	return &out.Snapshot, nil
}

// ListSnapshotsOptions are the GET /v2/sandboxes/snapshots filters
// (docs/dev/vercel-sandbox-api.md §5.10).
type ListSnapshotsOptions struct {
	// Name restricts the list to one named sandbox's snapshots.
	Name string
	// Limit is the page size, 1–50 (server default 20).
	Limit int
	// Cursor is the previous page's Pagination.Next.
	Cursor string
	// SortOrder is asc or desc (default).
	SortOrder string
}

// ListSnapshots returns one page of snapshots.
func (c *Client) ListSnapshots(ctx context.Context, opts ListSnapshotsOptions) (*ListSnapshotsResponse, error) {
	q := c.listQuery(opts.Limit, opts.Cursor, opts.SortOrder)
	if opts.Name != "" {
		q.Set("name", opts.Name)
	}
	r, _ := c.jsonRequest(EPListSnapshots, http.MethodGet, "/v2/sandboxes/snapshots", q, nil, retryable)
	var out ListSnapshotsResponse
	if err := c.do(ctx, r, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ListAllSnapshots walks every page from opts.Cursor on.
func (c *Client) ListAllSnapshots(ctx context.Context, opts ListSnapshotsOptions) ([]Snapshot, error) {
	return walkPages(EPListSnapshots, opts.Cursor, func(cursor string) ([]Snapshot, *string, error) {
		opts.Cursor = cursor
		page, err := c.ListSnapshots(ctx, opts)
		if err != nil {
			return nil, nil, err
		}
		return page.Snapshots, page.Pagination.Next, nil
	})
}

// DeleteSnapshot deletes a snapshot permanently and returns it with status
// "deleted". Retried; a retry after a lost answer may see 404, which callers
// treat as deleted.
func (c *Client) DeleteSnapshot(ctx context.Context, id string) (*Snapshot, error) {
	if err := checkID(EPDeleteSnapshot, "snapshot id", id); err != nil {
		return nil, err
	}
	r, _ := c.jsonRequest(EPDeleteSnapshot, http.MethodDelete, snapshotPath(id), nil, nil, retryable)
	var out SnapshotResponse
	if err := c.do(ctx, r, &out); err != nil {
		return nil, err
	}
	return &out.Snapshot, nil
}
