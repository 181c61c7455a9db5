package sandboxruntime

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/user"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// This file models one session's filesystem. A session is a
// host directory that stands for the sandbox's "/": the sandbox path /vercel/sandbox/a.txt
// is <root>/vercel/sandbox/a.txt, /tmp/x is <root>/tmp/x, /etc/hostname is
// <root>/etc/hostname. Every access made by the emulator itself (fs/read, fs/write,
// fs/mkdir, snapshots) stays inside that directory, whatever paths and symlinks the
// client or the sandbox's own commands throw at it:
//
//   - sandbox paths are resolved component by component with the semantics a process
//     chrooted into the root would see: ".." stops at "/", and an absolute symlink
//     target restarts from the session root, never from the host's "/";
//   - the resolved, symlink-free path is then opened through an os.Root, which the
//     kernel confines to the directory even if a running command swaps a component
//     for a symlink in between.
//
// Commands (exec.go) see the same tree because, in namespace mode, they are
// chrooted into it.

// ErrInvalidInput marks errors caused by the caller's input: a path or tar entry
// that escapes the sandbox, an absolute or escaping symlink in an upload, a hard
// link or device in an upload, a corrupt gzip/tar stream, a directory where a file
// is expected, an empty command name, a bad signal, ... Their messages are written
// for the API client: the emulator answers them with 400 bad_request and the
// error's message.
var ErrInvalidInput = errors.New("invalid input")

// requestError is an error caused by the request. It satisfies
// errors.Is(err, ErrInvalidInput), and errors.Is against its cause (e.g.
// fs.ErrExist), and its message is meant for the API client.
type requestError struct {
	msg   string
	cause error
}

func (e *requestError) Error() string        { return e.msg }
func (e *requestError) Unwrap() error        { return e.cause }
func (e *requestError) Is(target error) bool { return target == ErrInvalidInput }

// requestErrorf returns a requestError with a formatted message and an optional cause.
func requestErrorf(cause error, format string, args ...any) error {
	return &requestError{msg: fmt.Sprintf(format, args...), cause: cause}
}

const (
	// Workdir is the sandbox's working directory, the default for commands and
	// for relative paths in the fs API.
	Workdir = "/vercel/sandbox"
	// sandboxUserHome is the home directory of the unprivileged user vercel-sandbox.
	sandboxUserHome = "/home/vercel-sandbox"
	// maxSymlinkHops bounds symlink resolution, like the kernel's ELOOP limit.
	maxSymlinkHops = 40
	// snapshotEntryBytes is what every file, directory and symlink adds to a
	// snapshot's size on top of its content: the size of a tar header, so sizes are
	// close to those of a tar archive of the tree. The root directory counts too,
	// so even an empty sandbox has a non-zero size.
	snapshotEntryBytes = 512
)

// sandboxIdentity is the unprivileged user that non-sudo commands run as and that
// owns what the fs API writes.
type sandboxIdentity struct {
	uid, gid int
	name     string // "vercel-sandbox" or "nobody"
}

// sandboxUser returns the host user that plays vercel-sandbox: a host user of that
// name if there is one, else nobody (65534).
var sandboxUser = sync.OnceValue(func() sandboxIdentity {
	if u, err := user.Lookup("vercel-sandbox"); err == nil {
		uid, err1 := strconv.Atoi(u.Uid)
		gid, err2 := strconv.Atoi(u.Gid)
		if err1 == nil && err2 == nil {
			return sandboxIdentity{uid: uid, gid: gid, name: "vercel-sandbox"}
		}
	}
	return sandboxIdentity{uid: 65534, gid: 65534, name: "nobody"}
})

// sandboxIDBase is the first host uid and gid of the range a command's user
// namespace maps the sandbox's ids 0..65535 to (only the sandbox user keeps its
// own host id, so that what it and the fs API write stays its own). The
// sandbox's root is therefore host uid sandboxIDBase: an id no host user or
// file has, so "sudo" holds no privilege on the host. The value is the last
// 64Ki block of the range systemd leaves to containers (0x00080000-0x6FFFFFFF).
const sandboxIDBase = 0x6FFF0000

// sandboxRoot is the host identity that owns the sandbox's root-owned areas
// ("/", /root, /tmp, /vercel, /home): the host id of root inside a command's
// user namespace.
func sandboxRoot() sandboxIdentity {
	return sandboxIdentity{uid: sandboxIDBase, gid: sandboxIDBase, name: "root"}
}

// chownAllowed reports whether the emulator can hand files to the sandbox user
// (it runs as root). Otherwise everything simply belongs to the emulator's user.
var chownAllowed = sync.OnceValue(func() bool { return os.Geteuid() == 0 })

// FS is one session's filesystem: a host directory that stands for the
// sandbox's "/" (at least /vercel/sandbox, /tmp and /home/vercel-sandbox live
// inside it). It holds no open files and starts no goroutines, so an idle session
// costs only this struct.
type FS struct {
	root string // absolute host path of the sandbox's "/"
}

// NewFS creates (or reuses) dir as a session filesystem with the standard
// writable areas /vercel/sandbox, /tmp, /home/vercel-sandbox and /root. When the
// emulator runs as root, the user's areas belong to the sandbox user so that
// non-sudo commands can write to them.
func NewFS(dir string) (*FS, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(abs, 0o755); err != nil {
		return nil, fmt.Errorf("create sandbox filesystem: %w", err)
	}
	f := &FS{root: abs}
	if err := f.ensureLayout(); err != nil {
		return nil, err
	}
	return f, nil
}

// RestoreFS creates a session filesystem at dir from a snapshot taken with
// SnapshotTo. dir must not exist yet or be empty.
func RestoreFS(snapshotDir, dir string) (*FS, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(abs, 0o755); err != nil {
		return nil, fmt.Errorf("create sandbox filesystem: %w", err)
	}
	if _, err := copySandboxTree(snapshotDir, abs); err != nil {
		return nil, fmt.Errorf("restore snapshot: %w", err)
	}
	f := &FS{root: abs}
	// A snapshot always has the layout, but an old or hand-made one might not.
	if err := f.ensureLayout(); err != nil {
		return nil, err
	}
	return f, nil
}

// ensureLayout creates the standard directories that are missing. The root must be
// searchable by the sandbox user: it is the "/" of its commands.
func (f *FS) ensureLayout() error {
	if err := os.Chmod(f.root, 0o755); err != nil {
		return err
	}
	root := sandboxRoot()
	if chownAllowed() {
		// The sandbox's "/" belongs to its root, so sudo may create top-level
		// directories as in a real sandbox.
		if err := os.Lchown(f.root, root.uid, root.gid); err != nil {
			return err
		}
	}
	r, err := os.OpenRoot(f.root)
	if err != nil {
		return err
	}
	defer r.Close()
	u := sandboxUser()
	for _, d := range []struct {
		name      string
		mode      os.FileMode
		userOwned bool
	}{
		{"vercel", 0o755, false},
		{"vercel/sandbox", 0o755, true},
		{"tmp", 0o777 | os.ModeSticky, false},
		{"home", 0o755, false},
		{"home/vercel-sandbox", 0o755, true},
		{"root", 0o700, false},
	} {
		// Keep whatever the sandbox made of an existing entry, even a symlink out
		// of the root (which os.Root refuses to go through).
		if _, err := r.Lstat(d.name); !errors.Is(err, fs.ErrNotExist) {
			continue
		}
		err := r.Mkdir(d.name, 0o700)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			return fmt.Errorf("create sandbox filesystem: %w", err)
		}
		if err := r.Chmod(d.name, d.mode); err != nil {
			return err
		}
		if chownAllowed() {
			owner := root
			if d.userOwned {
				owner = u
			}
			if err := r.Lchown(d.name, owner.uid, owner.gid); err != nil {
				return err
			}
		}
	}
	return nil
}

// etcWorkSuffix names the sibling of a session directory that holds the
// work directories of its commands' /etc overlays (etc_linux.go): they must
// be on the session's filesystem, outside the sandbox.
const etcWorkSuffix = ".etc-work"

// errEtcReplaced: the session's /etc is not a directory (the fs API put a
// file or symlink there); commands then see the host's /etc as before.
var errEtcReplaced = errors.New("the session's /etc is not a directory")

// removeEtcWorkdir removes the overlay work directory of a finished command
// ("" = none). Its overlay may still be mounted where a process the command
// left behind holds its mount namespace: /etc copy-ups then fail for it.
func removeEtcWorkdir(dir string) {
	if dir != "" {
		_ = os.RemoveAll(dir)
	}
}

// Remove deletes the session's directory.
func (f *FS) Remove() error {
	_ = os.RemoveAll(f.root + etcWorkSuffix)
	err := os.RemoveAll(f.root)
	if err == nil {
		return nil
	}
	// A command running as the emulator's own (non-root) user may have left
	// directories without write or search permission; open them up and retry.
	_ = filepath.WalkDir(f.root, func(p string, d fs.DirEntry, err error) error {
		if d != nil && d.IsDir() {
			_ = os.Chmod(p, 0o700)
		}
		return nil
	})
	return os.RemoveAll(f.root)
}

// sandboxAbs turns a sandbox path given with a working directory into a clean
// absolute sandbox path. cwd "" is /vercel/sandbox; a relative cwd is taken
// relative to /vercel/sandbox. ".." never goes above "/".
func sandboxAbs(p, cwd string) string {
	if cwd == "" {
		cwd = Workdir
	} else if !path.IsAbs(cwd) {
		cwd = path.Join(Workdir, cwd)
	}
	if path.IsAbs(p) {
		return path.Clean(p)
	}
	return path.Join(cwd, p)
}

// pathComponents returns the non-empty components of a slash-separated path.
func pathComponents(p string) []string {
	return strings.FieldsFunc(p, func(r rune) bool { return r == '/' })
}

// resolveSandboxPath resolves the absolute sandbox path p inside the session root r and
// returns the equivalent root-relative path that contains no symlinks ("." for the
// root). Components from the first missing one onwards are returned as they are, so
// the result can be created. With followLast false a final symlink is not followed.
//
// Lenient mode (strict false) is what a process chrooted into the root sees: ".."
// stops at "/", absolute symlink targets restart from the session root. Strict mode
// is for writes from uploads: any symlink with an absolute target and any ".." that
// would leave the root is refused with ErrInvalidInput.
//
// A component that exists but is not a directory makes the resolution fail with an
// error wrapping syscall.ENOTDIR.
func resolveSandboxPath(r *os.Root, p string, followLast, strict bool) (string, error) {
	todo := pathComponents(p)
	var done []string
	hops := 0
	for len(todo) > 0 {
		c := todo[0]
		todo = todo[1:]
		switch c {
		case ".":
			continue
		case "..":
			if len(done) == 0 {
				if strict {
					return "", requestErrorf(nil, "path %q escapes the sandbox root", p)
				}
				continue
			}
			done = done[:len(done)-1]
			continue
		}
		cur := path.Join(path.Join(done...), c)
		fi, err := r.Lstat(cur)
		if errors.Is(err, fs.ErrNotExist) {
			// Nothing below a missing component exists either; a ".." further on
			// would need the missing directory to exist.
			for _, t := range todo {
				if t == ".." {
					return "", &fs.PathError{Op: "resolve", Path: p, Err: fs.ErrNotExist}
				}
			}
			return path.Join(append([]string{cur}, todo...)...), nil
		}
		if err != nil {
			if errors.Is(err, syscall.ENOTDIR) {
				return "", &fs.PathError{Op: "resolve", Path: p, Err: syscall.ENOTDIR}
			}
			return "", err
		}
		if fi.Mode()&fs.ModeSymlink != 0 && (len(todo) > 0 || followLast) {
			hops++
			if hops > maxSymlinkHops {
				return "", requestErrorf(syscall.ELOOP, "path %q: too many levels of symbolic links", p)
			}
			target, err := r.Readlink(cur)
			if err != nil {
				return "", err
			}
			if path.IsAbs(target) {
				if strict {
					return "", requestErrorf(nil, "path %q goes through symlink /%s with absolute target %q", p, cur, target)
				}
				done = done[:0]
			}
			todo = append(pathComponents(target), todo...)
			continue
		}
		if len(todo) > 0 && !fi.IsDir() {
			return "", &fs.PathError{Op: "resolve", Path: p, Err: syscall.ENOTDIR}
		}
		done = append(done, c)
	}
	if len(done) == 0 {
		return ".", nil
	}
	return path.Join(done...), nil
}

// hostPath returns the host path of the sandbox path p (lenient resolution). Used
// for host-mode commands, which cannot be chrooted.
func (f *FS) hostPath(p string) (string, error) {
	r, err := os.OpenRoot(f.root)
	if err != nil {
		return "", err
	}
	defer r.Close()
	rel, err := resolveSandboxPath(r, sandboxAbs(p, "/"), true, false)
	if err != nil {
		return "", err
	}
	return filepath.Join(f.root, filepath.FromSlash(rel)), nil
}

// ReadFile returns the content of the regular file at the sandbox path p
// (relative to cwd, "" = /vercel/sandbox). A missing file, or a path through a
// non-directory, gives an error satisfying errors.Is(err, fs.ErrNotExist); a
// directory or special file gives ErrInvalidInput. Symlinks are followed as the
// sandbox would, absolute ones from the session root, so a link to /etc/passwd
// reads the session's /etc/passwd (its own once a command ran, etc_linux.go),
// never the host's.
func (f *FS) ReadFile(p, cwd string) ([]byte, error) {
	return f.ReadFileLimit(p, cwd, 0)
}

// ReadFileLimit is ReadFile for files of at most max bytes (0 = no limit); a
// larger file, or one that grows past max while read, is an ErrInvalidInput
// error, so one fs/read cannot make the emulator hold a huge file in memory.
func (f *FS) ReadFileLimit(p, cwd string, max int64) ([]byte, error) {
	if p == "" {
		return nil, requestErrorf(nil, "path is required")
	}
	abs := sandboxAbs(p, cwd)
	r, err := os.OpenRoot(f.root)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	rel, err := resolveSandboxPath(r, abs, true, false)
	if err != nil {
		if errors.Is(err, syscall.ENOTDIR) {
			return nil, &fs.PathError{Op: "read", Path: abs, Err: fs.ErrNotExist}
		}
		return nil, err
	}
	// O_NONBLOCK: opening a FIFO someone left there must not hang the request.
	file, err := r.OpenFile(rel, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
			return nil, &fs.PathError{Op: "read", Path: abs, Err: fs.ErrNotExist}
		}
		return nil, err
	}
	defer file.Close()
	fi, err := file.Stat()
	if err != nil {
		return nil, err
	}
	switch {
	case fi.IsDir():
		return nil, requestErrorf(syscall.EISDIR, "path %q is a directory", abs)
	case !fi.Mode().IsRegular():
		return nil, requestErrorf(nil, "path %q is not a regular file", abs)
	}
	if max <= 0 {
		return io.ReadAll(file)
	}
	if fi.Size() > max {
		return nil, requestErrorf(nil, "file %q has %d bytes, more than the emulator's read limit of %d bytes", abs, fi.Size(), max)
	}
	data, err := io.ReadAll(io.LimitReader(file, max+1))
	if err == nil && int64(len(data)) > max {
		return nil, requestErrorf(nil, "file %q grew past the emulator's read limit of %d bytes", abs, max)
	}
	return data, err
}

// Mkdir creates the directory at the sandbox path p (relative to cwd). With
// recursive it creates missing parents and accepts an existing directory (mkdir
// -p); without, the parent must exist and the path must not (errors wrapping
// fs.ErrNotExist and fs.ErrExist respectively, both also ErrInvalidInput). New
// directories belong to the sandbox user.
func (f *FS) Mkdir(p, cwd string, recursive bool) error {
	if p == "" {
		return requestErrorf(nil, "path is required")
	}
	abs := sandboxAbs(p, cwd)
	r, err := os.OpenRoot(f.root)
	if err != nil {
		return err
	}
	defer r.Close()
	if recursive {
		_, err := ensureSandboxDir(r, abs, false)
		return err
	}
	parent, err := resolveSandboxPath(r, path.Dir(abs), true, false)
	if err != nil {
		if errors.Is(err, syscall.ENOTDIR) {
			return requestErrorf(fs.ErrNotExist, "mkdir %q: parent is not a directory", abs)
		}
		return err
	}
	if fi, err := r.Stat(parent); err != nil || !fi.IsDir() {
		return requestErrorf(fs.ErrNotExist, "mkdir %q: parent directory does not exist", abs)
	}
	if abs == "/" {
		return requestErrorf(fs.ErrExist, "mkdir %q: file exists", abs)
	}
	rel := path.Join(parent, path.Base(abs))
	if err := r.Mkdir(rel, 0o755); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return requestErrorf(fs.ErrExist, "mkdir %q: file exists", abs)
		}
		return err
	}
	if err := r.Chmod(rel, 0o755); err != nil { // undo the umask
		return err
	}
	return chownToSandboxUser(r, rel)
}

// ensureSandboxDir makes the absolute sandbox path abs a directory, creating missing
// components (mkdir -p), and returns its root-relative, symlink-free path. An
// existing non-directory on the way is an ErrInvalidInput. strict is as for
// resolveSandboxPath.
func ensureSandboxDir(r *os.Root, abs string, strict bool) (string, error) {
	rel, err := resolveSandboxPath(r, abs, true, strict)
	if err != nil {
		if errors.Is(err, syscall.ENOTDIR) {
			return "", requestErrorf(syscall.ENOTDIR, "%q: not a directory", abs)
		}
		return "", err
	}
	if rel == "." {
		return rel, nil
	}
	cur := ""
	for _, c := range pathComponents(rel) {
		cur = path.Join(cur, c)
		fi, err := r.Lstat(cur)
		if errors.Is(err, fs.ErrNotExist) {
			err = r.Mkdir(cur, 0o755)
			if err == nil {
				if err := r.Chmod(cur, 0o755); err != nil { // undo the umask
					return "", err
				}
				if err := chownToSandboxUser(r, cur); err != nil {
					return "", err
				}
				continue
			}
			if !errors.Is(err, fs.ErrExist) { // lost a race: look again
				return "", err
			}
			fi, err = r.Lstat(cur)
		}
		if err != nil {
			return "", err
		}
		if !fi.IsDir() {
			// A symlink here means one was put in after resolution; refuse too.
			return "", requestErrorf(syscall.ENOTDIR, "%q: /%s is not a directory", abs, cur)
		}
	}
	return rel, nil
}

// chownToSandboxUser hands rel (not following a final symlink) to the sandbox user, when
// the emulator may.
func chownToSandboxUser(r *os.Root, rel string) error {
	if !chownAllowed() {
		return nil
	}
	u := sandboxUser()
	return r.Lchown(rel, u.uid, u.gid)
}

// SnapshotTo copies the session's tree (directories, regular files, symlinks, with
// modes, times and, when running as root, owners) into dir, which must not exist
// yet or be empty, and returns the snapshot's size: the content bytes plus
// snapshotEntryBytes per entry including the root, so it is always > 0. Sockets,
// FIFOs and devices a command may have created are skipped.
func (f *FS) SnapshotTo(dir string) (int64, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return 0, fmt.Errorf("create snapshot: %w", err)
	}
	n, err := copySandboxTree(f.root, dir)
	if err != nil {
		return 0, fmt.Errorf("create snapshot: %w", err)
	}
	return n, nil
}

// maxCopyDepth guards copySandboxTree against directory cycles a running command could
// create by swapping a directory for a symlink while it is copied.
const maxCopyDepth = 1024

// copySandboxTree copies the tree under src into the existing, empty directory dst
// without ever following a symlink out of src, and returns the snapshot size (see
// SnapshotTo).
func copySandboxTree(src, dst string) (int64, error) {
	sr, err := os.OpenRoot(src)
	if err != nil {
		return 0, err
	}
	defer sr.Close()
	dr, err := os.OpenRoot(dst)
	if err != nil {
		return 0, err
	}
	defer dr.Close()
	fi, err := sr.Lstat(".")
	if err != nil {
		return 0, err
	}
	n, err := copyTreeDir(sr, dr, 0)
	if err != nil {
		return 0, err
	}
	if err := copyTreeMeta(dr, ".", fi); err != nil {
		return 0, err
	}
	return n + snapshotEntryBytes, nil
}

// copyTreeDir copies the entries of the directory s into the directory d.
func copyTreeDir(s, d *os.Root, depth int) (int64, error) {
	if depth > maxCopyDepth {
		return 0, fmt.Errorf("directory tree deeper than %d levels", maxCopyDepth)
	}
	dirf, err := s.Open(".")
	if err != nil {
		return 0, err
	}
	entries, err := dirf.ReadDir(-1)
	dirf.Close()
	if err != nil {
		return 0, err
	}
	var total int64
	for _, e := range entries {
		name := e.Name()
		fi, err := e.Info() // lstat
		if errors.Is(err, fs.ErrNotExist) {
			continue // deleted since the directory was read
		}
		if err != nil {
			return 0, err
		}
		switch {
		case fi.IsDir():
			if err := d.Mkdir(name, 0o700); err != nil {
				return 0, err
			}
			ss, err := s.OpenRoot(name)
			if err != nil {
				return 0, err
			}
			dd, err := d.OpenRoot(name)
			if err != nil {
				ss.Close()
				return 0, err
			}
			n, err := copyTreeDir(ss, dd, depth+1)
			ss.Close()
			dd.Close()
			if err != nil {
				return 0, err
			}
			total += n
		case fi.Mode().IsRegular():
			n, err := copyTreeFile(s, d, name)
			if err != nil {
				return 0, err
			}
			total += n
		case fi.Mode()&fs.ModeSymlink != 0:
			target, err := s.Readlink(name)
			if err != nil {
				return 0, err
			}
			if err := d.Symlink(target, name); err != nil {
				return 0, err
			}
		default:
			continue // socket, FIFO, device: not part of a snapshot
		}
		if err := copyTreeMeta(d, name, fi); err != nil {
			return 0, err
		}
		total += snapshotEntryBytes
	}
	return total, nil
}

// copyTreeFile copies the regular file name from s to d and returns its size.
func copyTreeFile(s, d *os.Root, name string) (int64, error) {
	in, err := s.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return 0, err
	}
	defer in.Close()
	if fi, err := in.Stat(); err != nil || !fi.Mode().IsRegular() {
		return 0, fmt.Errorf("copy %s: no longer a regular file", name)
	}
	out, err := d.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return 0, err
	}
	n, err := io.Copy(out, in) // copy_file_range: reflinks where the filesystem can
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return n, err
}

// copyTreeMeta applies fi's mode, owner (when running as root) and times to name in d.
// Symlinks only get their owner.
func copyTreeMeta(d *os.Root, name string, fi fs.FileInfo) error {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && chownAllowed() {
		if err := d.Lchown(name, int(st.Uid), int(st.Gid)); err != nil {
			return err
		}
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		return nil
	}
	if err := d.Chmod(name, fi.Mode()&(fs.ModePerm|fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky)); err != nil {
		return err
	}
	return d.Chtimes(name, fi.ModTime(), fi.ModTime())
}
