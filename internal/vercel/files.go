package vercel

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"net/http"
	"path"
	"strings"
	"time"
)

// DefaultCwd is the working directory of every session in practice
// (docs/dev/vercel-sandbox-api.md §3.1); relative paths given to WriteFiles are
// resolved against it.
const DefaultCwd = "/vercel/sandbox"

// File is one file for WriteFiles. Mode is the permission bits (0 = 0644).
type File struct {
	Path    string
	Content []byte
	Mode    int64
}

// tarEntryName mirrors the SDK's normalizePath
// (docs/dev/vercel-sandbox-api.md §5.9): absolute paths are cleaned, relative
// ones joined onto DefaultCwd, and the result made relative to "/" because the
// upload is sent with x-cwd: /.
func tarEntryName(p string) (string, error) {
	if p == "" || strings.ContainsRune(p, 0) {
		return "", fmt.Errorf("invalid path %q", p)
	}
	if !path.IsAbs(p) {
		p = path.Join(DefaultCwd, p)
	}
	name := strings.TrimPrefix(path.Clean(p), "/")
	if name == "" {
		return "", fmt.Errorf("invalid path %q: names the root directory", p)
	}
	return name, nil
}

// buildTarGz packs files as the SDK does: one regular-file entry each, no
// directory entries (the server creates parents), gzip-compressed.
func buildTarGz(files []File, now time.Time) ([]byte, error) {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for _, f := range files {
		name, err := tarEntryName(f.Path)
		if err != nil {
			return nil, err
		}
		mode := f.Mode & 0o7777
		if mode == 0 {
			mode = 0o644
		}
		hdr := &tar.Header{
			Typeflag: tar.TypeReg,
			Name:     name,
			Size:     int64(len(f.Content)),
			Mode:     mode,
			ModTime:  now,
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, fmt.Errorf("tar header for %q: %w", f.Path, err)
		}
		if _, err := tw.Write(f.Content); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// WriteFiles uploads files into the session as one gzip'd tar
// (docs/dev/vercel-sandbox-api.md §5.9), creating parent directories and
// overwriting existing files. It is sent once (an upload is not known to be
// atomic); writing the same files again is the caller's decision.
func (c *Client) WriteFiles(ctx context.Context, sessionID string, files []File) error {
	if err := checkID(EPWriteFiles, "session id", sessionID); err != nil {
		return err
	}
	if len(files) == 0 {
		return nil
	}
	body, err := buildTarGz(files, time.Now())
	if err != nil {
		return fmt.Errorf("vercel %s: %w", EPWriteFiles, err)
	}
	r := &request{
		endpoint:    EPWriteFiles,
		method:      http.MethodPost,
		path:        sessionPath(sessionID) + "/fs/write",
		body:        body,
		contentType: "application/gzip",
		// Entry names are relative to "/", so the extraction root is "/".
		header: http.Header{"X-Cwd": {"/"}},
		retry:  sendOnce,
	}
	return c.do(ctx, r, nil)
}

// ReadFile returns a file's bytes (docs/dev/vercel-sandbox-api.md §5.9). A
// relative path resolves against cwd ("" = the session's working directory). A
// missing file is an *APIError for which IsNotFound is true. Reading is retried
// like a GET: the POST has no side effect.
func (c *Client) ReadFile(ctx context.Context, sessionID, path, cwd string) ([]byte, error) {
	if err := checkID(EPReadFile, "session id", sessionID); err != nil {
		return nil, err
	}
	r, err := c.jsonRequest(EPReadFile, http.MethodPost, sessionPath(sessionID)+"/fs/read", nil,
		ReadFileRequest{Path: path, Cwd: cwd}, retryable)
	if err != nil {
		return nil, err
	}
	// A file may be large: it is read as a stream, its start bounded by
	// CallTimeout and each read by StreamIdleTimeout.
	resp, sctx, err := c.openBody(ctx, r)
	if err != nil {
		return nil, err
	}
	defer closeBody(resp.Body)
	if err := checkMediaType(EPReadFile, resp, "application/octet-stream"); err != nil {
		return nil, err
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, c.bodyError(sctx, EPReadFile, "read file", err)
	}
	return b, nil
}

// Mkdir creates a directory (docs/dev/vercel-sandbox-api.md §5.9). recursive is
// always sent explicitly because the API's default is disputed (OpenAPI true,
// SDK mock false).
func (c *Client) Mkdir(ctx context.Context, sessionID, path, cwd string, recursive bool) error {
	if err := checkID(EPMkdir, "session id", sessionID); err != nil {
		return err
	}
	r, err := c.jsonRequest(EPMkdir, http.MethodPost, sessionPath(sessionID)+"/fs/mkdir", nil,
		MkdirRequest{Path: path, Cwd: cwd, Recursive: &recursive}, sendOnce)
	if err != nil {
		return err
	}
	return c.do(ctx, r, nil)
}
