package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/getsentry/sandbox-controller/pkg/dataplane"
)

func newCpCommand(o *options) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "cp SRC DST",
		Short: "Copy files and directories between this machine and a Sandbox (NAME:PATH)",
		Long: `cp copies a file or a directory tree into a Sandbox (DST is NAME:PATH) or out of one (SRC is
NAME:PATH), like cp -r: when DST is an existing directory (or ends with /) the copy goes inside
it under SRC's base name, otherwise it becomes DST. A relative sandbox path is under
/vercel/sandbox. Uploads keep file modes; symbolic links are skipped (with a warning).
Directories are fetched as one tar archive made in the sandbox (it needs tar, as Vercel's images
have). Like exec, cp records a heartbeat and waits until the Sandbox is Ready.`,
		Example: `  kubectl sandbox cp ./app.js dev:/vercel/sandbox/app.js
  kubectl sandbox cp ./src dev:src
  kubectl sandbox cp dev:/vercel/sandbox/out ./out`,
		Args: cobra.ExactArgs(2),
	}
	timeout := timeoutFlag(cmd, 5*time.Minute)
	cmd.Flag("timeout").Usage = "How long to wait for the Sandbox to be Ready; 0 waits forever"
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		srcName, srcPath, srcRemote := splitRemote(args[0])
		dstName, dstPath, dstRemote := splitRemote(args[1])
		if srcRemote == dstRemote {
			return fmt.Errorf("cp: exactly one of SRC and DST is NAME:PATH in a Sandbox")
		}
		name := srcName
		if dstRemote {
			name = dstName
		}
		ctx := cmd.Context()
		s, err := o.openSession(ctx, name, *timeout)
		if err != nil {
			return err
		}
		defer s.close()
		if dstRemote {
			return upload(ctx, s, srcPath, dstPath, o.ErrOut)
		}
		return download(ctx, s, srcPath, dstPath)
	}
	return cmd
}

// splitRemote reads NAME:PATH. A local path with a colon is written with a
// directory part (./a:b), as for kubectl cp.
func splitRemote(arg string) (name, p string, remote bool) {
	i := strings.Index(arg, ":")
	if i <= 0 || strings.ContainsAny(arg[:i], `/\`) {
		return "", arg, false
	}
	p = arg[i+1:]
	if p == "" {
		p = "."
	}
	return arg[:i], p, true
}

// remoteType is "dir", "file" or "none" for a path in the sandbox.
func remoteType(ctx context.Context, s *liveSession, p string) (string, error) {
	var out, errOut bytes.Buffer
	code, err := s.run(ctx, dataplane.Command{Name: "sh", Args: []string{"-c",
		`if [ -d "$1" ]; then echo dir; elif [ -e "$1" ]; then echo file; else echo none; fi`, "sh", p}}, &out, &errOut)
	if err != nil {
		return "", err
	}
	if code != 0 {
		return "", fmt.Errorf("test %s in the sandbox: exit code %d: %s", p, code, strings.TrimSpace(errOut.String()))
	}
	return strings.TrimSpace(out.String()), nil
}

func upload(ctx context.Context, s *liveSession, src, dst string, warn io.Writer) error {
	info, err := os.Stat(src)
	if err != nil {
		return err
	}
	kind, err := remoteType(ctx, s, dst)
	if err != nil {
		return err
	}
	if kind == "dir" || strings.HasSuffix(dst, "/") {
		dst = path.Join(dst, filepath.Base(filepath.Clean(src)))
	}
	if !info.IsDir() {
		content, err := os.ReadFile(src)
		if err != nil {
			return err
		}
		return s.WriteFiles(ctx, dataplane.File{Path: dst, Content: content, Mode: info.Mode().Perm()})
	}
	var files []dataplane.File
	var dirs []string
	err = filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		target := path.Join(dst, filepath.ToSlash(rel))
		switch {
		case d.IsDir():
			dirs = append(dirs, target)
		case d.Type().IsRegular():
			fi, err := d.Info()
			if err != nil {
				return err
			}
			content, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			files = append(files, dataplane.File{Path: target, Content: content, Mode: fi.Mode().Perm()})
		default:
			fmt.Fprintf(warn, "warning: skipped %s: not a regular file or directory\n", p)
		}
		return nil
	})
	if err != nil {
		return err
	}
	// Empty directories are not in the upload; every directory is made first.
	for _, d := range dirs {
		if err := s.Mkdir(ctx, d); err != nil {
			return err
		}
	}
	return s.WriteFiles(ctx, files...)
}

func download(ctx context.Context, s *liveSession, src, dst string) error {
	kind, err := remoteType(ctx, s, src)
	if err != nil {
		return err
	}
	if kind == "none" {
		return fmt.Errorf("%s:%s: no such file or directory", s.name, src)
	}
	if fi, err := os.Stat(dst); (err == nil && fi.IsDir()) || strings.HasSuffix(dst, string(os.PathSeparator)) {
		dst = filepath.Join(dst, path.Base(path.Clean(src)))
	}
	if kind == "file" {
		content, err := s.ReadFile(ctx, src)
		if err != nil {
			return err
		}
		return os.WriteFile(dst, content, 0o644)
	}
	// A directory: tar it in the sandbox, fetch the archive, unpack it here.
	archive := "/tmp/.kubectl-sandbox-cp-" + randomSuffix() + ".tar.gz"
	var errOut bytes.Buffer
	code, err := s.run(ctx, dataplane.Command{Name: "tar", Args: []string{"-czf", archive, "-C", src, "."}}, nil, &errOut)
	defer func() {
		_, _ = s.run(context.WithoutCancel(ctx), dataplane.Command{Name: "rm", Args: []string{"-f", archive}}, nil, nil)
	}()
	if err != nil {
		return err
	}
	if code != 0 {
		return fmt.Errorf("tar %s in the sandbox: exit code %d: %s", src, code, strings.TrimSpace(errOut.String()))
	}
	content, err := s.ReadFile(ctx, archive)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	return untar(bytes.NewReader(content), dst)
}

// untar unpacks a gzip'd tar into dir; entries cannot leave dir (os.Root).
// Only directories and regular files are unpacked.
func untar(r io.Reader, dir string) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	zr, err := gzip.NewReader(r)
	if err != nil {
		return err
	}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		name := path.Clean(h.Name)
		if name == "." {
			continue
		}
		mode := fs.FileMode(h.Mode).Perm()
		switch h.Typeflag {
		case tar.TypeDir:
			if err := root.MkdirAll(name, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			if d := path.Dir(name); d != "." {
				if err := root.MkdirAll(d, 0o755); err != nil {
					return err
				}
			}
			f, err := root.OpenFile(name, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
			if err != nil {
				return err
			}
			_, err = io.Copy(f, tr)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		}
	}
}
