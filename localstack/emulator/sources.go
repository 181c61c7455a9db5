package emulator

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/getsentry/sandbox-controller/internal/vercel"
	"github.com/getsentry/sandbox-controller/localstack/emulator/sandboxruntime"
)

// This file materialises a create's git or tarball source in a new session's
// filesystem (bootSession calls it before the session runs).

// Sources come from a tenant's create request, and the emulator fetches them
// with its own (often root) privileges, so it reads only what the person
// running it allowed: files inside Options.AllowedSourceDir, and http(s) URLs
// on loopback. Tarballs are unpacked within Options.SourceLimits.

// gitClone clones a git source into /vercel/sandbox when git exists and the
// URL is a repository inside the allowed source directory (a path or
// file://); other URLs are only recorded.
func (e *Emulator) gitClone(sfs *sandboxruntime.FS, src *vercel.Source) error {
	git, err := exec.LookPath("git")
	if err != nil {
		return fmt.Errorf("git not installed")
	}
	u := src.URL
	parsed, perr := url.Parse(u)
	if perr != nil {
		return perr
	}
	switch {
	case parsed.Scheme == "file":
		if parsed.Host != "" && parsed.Host != "localhost" {
			return fmt.Errorf("file:// URLs must not name a host")
		}
		if _, err := e.allowedSourcePath(parsed.Path); err != nil {
			return err
		}
	case parsed.Scheme == "":
		if _, err := e.allowedSourcePath(u); err != nil {
			return err
		}
	default:
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

// allowedSourcePath returns p relative to the allowed source directory, or an
// error when there is none or p (with its symlinks resolved) lies outside it.
func (e *Emulator) allowedSourcePath(p string) (string, error) {
	dir := e.opts.AllowedSourceDir
	if dir == "" {
		return "", fmt.Errorf("host paths are refused: no allowed source directory is configured (--allowed-source-dir)")
	}
	if !filepath.IsAbs(p) {
		return "", fmt.Errorf("source path %q is not absolute", p)
	}
	resolved, err := filepath.EvalSymlinks(filepath.Clean(p))
	if err != nil {
		return "", err
	}
	rel, err := filepath.Rel(dir, resolved)
	if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return "", fmt.Errorf("source path %q is outside the allowed source directory", p)
	}
	return rel, nil
}

// openAllowedFile opens the regular file p inside the allowed source
// directory. The open goes through os.Root, so no symlink swapped in after the
// check can lead it out of the directory.
func (e *Emulator) openAllowedFile(p string) (*os.File, error) {
	rel, err := e.allowedSourcePath(p)
	if err != nil {
		return nil, err
	}
	root, err := os.OpenRoot(e.opts.AllowedSourceDir)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	// O_NONBLOCK: a FIFO must not hang the boot.
	f, err := root.OpenFile(rel, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("source path %q is not a regular file", p)
	}
	return f, nil
}

// errNotLoopback refuses a connection to an address that is not loopback.
var errNotLoopback = errors.New("tarball URLs must point to a loopback address (127.0.0.0/8, ::1 or localhost)")

// checkLoopbackURL accepts http(s) URLs whose host is a loopback IP or
// localhost. Names are not resolved here; the dialer checks the address it
// actually connects to.
func checkLoopbackURL(u *url.URL) error {
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("unsupported tarball URL scheme %q", u.Scheme)
	}
	host := u.Hostname()
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return errNotLoopback
}

// loopbackClient is an HTTP client that connects only to loopback addresses,
// uses no proxy and follows redirects only to loopback URLs.
func loopbackClient() *http.Client {
	dialer := &net.Dialer{
		Timeout: 30 * time.Second,
		Control: func(_, address string, _ syscall.RawConn) error {
			host, _, err := net.SplitHostPort(address)
			if err != nil {
				return err
			}
			if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
				return errNotLoopback
			}
			return nil
		},
	}
	tr := &http.Transport{Proxy: nil, DialContext: dialer.DialContext, DisableKeepAlives: true}
	return &http.Client{Transport: tr, CheckRedirect: func(req *http.Request, via []*http.Request) error {
		if len(via) >= 5 {
			return errors.New("too many redirects")
		}
		return checkLoopbackURL(req.URL)
	}}
}

// fetchTarball downloads a tarball source (http(s) on loopback, or a file of
// the allowed source directory as a path or file:// URL) and extracts it into
// /vercel/sandbox within the source limits.
func (e *Emulator) fetchTarball(sfs *sandboxruntime.FS, raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return err
	}
	lim := e.opts.SourceLimits
	var body io.ReadCloser
	switch u.Scheme {
	case "http", "https":
		if err := checkLoopbackURL(u); err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, raw, nil)
		if err != nil {
			return err
		}
		hc := loopbackClient()
		defer hc.CloseIdleConnections()
		resp, err := hc.Do(req)
		if err != nil {
			return err
		}
		if resp.StatusCode != http.StatusOK {
			resp.Body.Close()
			return fmt.Errorf("GET %s: %s", raw, resp.Status)
		}
		body = resp.Body
	case "file", "":
		if u.Scheme == "file" && u.Host != "" && u.Host != "localhost" {
			return fmt.Errorf("file:// URLs must not name a host")
		}
		f, err := e.openAllowedFile(u.Path)
		if err != nil {
			return err
		}
		body = f
	default:
		return fmt.Errorf("unsupported tarball URL scheme %q", u.Scheme)
	}
	defer body.Close()
	// gzip never grows incompressible data by more than a little, so a
	// compressed stream longer than the decompressed bound is refused too.
	limited := &maxBytesReader{r: body, left: lim.StreamBytes() + 1<<20}
	if err := sfs.ExtractTarGzLimited(defaultCwd, limited, lim); err != nil {
		if limited.hit {
			return fmt.Errorf("tarball exceeds %d compressed bytes", lim.StreamBytes()+1<<20)
		}
		return err
	}
	return nil
}

// maxBytesReader fails once more than left bytes were read.
type maxBytesReader struct {
	r    io.Reader
	left int64
	hit  bool
}

func (m *maxBytesReader) Read(p []byte) (int, error) {
	if m.left <= 0 {
		m.hit = true
		return 0, errors.New("source too large")
	}
	if int64(len(p)) > m.left {
		p = p[:m.left]
	}
	n, err := m.r.Read(p)
	m.left -= int64(n)
	return n, err
}
