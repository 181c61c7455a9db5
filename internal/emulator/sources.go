package emulator

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/getsentry/sandbox-controller/internal/emulator/sandboxruntime"
	"github.com/getsentry/sandbox-controller/internal/vercel"
)

// This file materialises a create's git or tarball source in a new session's
// filesystem (bootSession calls it before the session runs).

// gitClone clones a git source into /vercel/sandbox when git exists and the
// URL is local (a path or file://); other URLs are only recorded.
func (e *Emulator) gitClone(sfs *sandboxruntime.FS, src *vercel.Source) error {
	git, err := exec.LookPath("git")
	if err != nil {
		return fmt.Errorf("git not installed")
	}
	u := src.URL
	if parsed, perr := url.Parse(u); perr == nil && parsed.Scheme != "" && parsed.Scheme != "file" {
		return fmt.Errorf("only local (file://) git URLs are cloned by the emulator")
	}
	tmp, err := os.MkdirTemp(filepath.Join(e.dataDir), "clone-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	args := []string{"clone", "--quiet"}
	if src.Depth > 0 {
		args = append(args, "--depth", fmt.Sprint(src.Depth))
		if strings.HasPrefix(u, "/") {
			u = "file://" + u // --depth is ignored for plain local paths
		}
	}
	if src.Revision != "" && src.Depth > 0 {
		args = append(args, "--no-single-branch")
	}
	args = append(args, "--", u, filepath.Join(tmp, "repo"))
	cmd := exec.CommandContext(ctx, git, args...)
	cmd.Env = append(os.Environ(), "GIT_TERMINAL_PROMPT=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("git clone: %v: %s", err, strings.TrimSpace(string(out)))
	}
	if src.Revision != "" {
		co := exec.CommandContext(ctx, git, "-C", filepath.Join(tmp, "repo"), "checkout", "--quiet", src.Revision)
		if out, err := co.CombinedOutput(); err != nil {
			return fmt.Errorf("git checkout %s: %v: %s", src.Revision, err, strings.TrimSpace(string(out)))
		}
	}
	return sfs.CopyDir(filepath.Join(tmp, "repo"), defaultCwd)
}

// fetchTarball downloads a tarball source (http, https, file:// or a local
// path) and extracts it into /vercel/sandbox.
func (e *Emulator) fetchTarball(sfs *sandboxruntime.FS, raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return err
	}
	var body io.ReadCloser
	switch u.Scheme {
	case "http", "https":
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, raw, nil)
		if err != nil {
			return err
		}
		tr := &http.Transport{Proxy: http.ProxyFromEnvironment, DisableKeepAlives: true}
		defer tr.CloseIdleConnections()
		resp, err := (&http.Client{Transport: tr}).Do(req)
		if err != nil {
			return err
		}
		if resp.StatusCode != http.StatusOK {
			resp.Body.Close()
			return fmt.Errorf("GET %s: %s", raw, resp.Status)
		}
		body = resp.Body
	case "file", "":
		f, err := os.Open(u.Path)
		if err != nil {
			return err
		}
		body = f
	default:
		return fmt.Errorf("unsupported tarball URL scheme %q", u.Scheme)
	}
	defer body.Close()
	return sfs.ExtractTarGz(defaultCwd, body)
}
