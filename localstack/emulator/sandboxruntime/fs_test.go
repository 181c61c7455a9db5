package sandboxruntime

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// rtNewFS creates a session filesystem in a fresh directory and returns it with
// the directory around it, which tests walk to prove nothing escaped the root.
func rtNewFS(t *testing.T) (f *FS, parent string) {
	t.Helper()
	parent = t.TempDir()
	f, err := NewFS(filepath.Join(parent, "root"))
	if err != nil {
		t.Fatal(err)
	}
	return f, parent
}

// rtWrite creates a file (and its parents) at the sandbox path p directly on disk.
func rtWrite(t *testing.T, f *FS, p, content string, mode os.FileMode) {
	t.Helper()
	host := filepath.Join(f.root, filepath.FromSlash(p))
	if err := os.MkdirAll(filepath.Dir(host), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(host, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(host, mode); err != nil {
		t.Fatal(err)
	}
}

// rtSymlink creates a symlink at the sandbox path p directly on disk.
func rtSymlink(t *testing.T, f *FS, p, target string) {
	t.Helper()
	host := filepath.Join(f.root, filepath.FromSlash(p))
	if err := os.MkdirAll(filepath.Dir(host), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, host); err != nil {
		t.Fatal(err)
	}
}

// rtEntriesOutside lists what exists in parent outside the session root and
// outside the allowed names.
func rtEntriesOutside(t *testing.T, parent, root string, allowed ...string) []string {
	t.Helper()
	var extra []string
	err := filepath.WalkDir(parent, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == parent {
			return nil
		}
		if p == root {
			return filepath.SkipDir
		}
		rel, _ := filepath.Rel(parent, p)
		for _, a := range allowed {
			if rel == a {
				return nil
			}
		}
		extra = append(extra, rel)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return extra
}

func TestSandboxFSLayout(t *testing.T) {
	f, _ := rtNewFS(t)
	for _, d := range []struct {
		path      string
		mode      os.FileMode
		userOwned bool
	}{
		{"", 0o755, false},
		{"vercel/sandbox", 0o755, true},
		{"tmp", 0o777 | os.ModeSticky, false},
		{"home/vercel-sandbox", 0o755, true},
		{"root", 0o700, false},
	} {
		fi, err := os.Stat(filepath.Join(f.root, d.path))
		if err != nil {
			t.Fatalf("/%s: %v", d.path, err)
		}
		if got := fi.Mode() & (fs.ModePerm | fs.ModeSticky); !fi.IsDir() || got != d.mode {
			t.Errorf("/%s: mode %v, want directory %v", d.path, fi.Mode(), d.mode)
		}
		if chownAllowed() && d.userOwned {
			if uid := fi.Sys().(*syscall.Stat_t).Uid; int(uid) != sandboxUser().uid {
				t.Errorf("/%s: owner %d, want the sandbox user %d", d.path, uid, sandboxUser().uid)
			}
		}
	}
	// Reusing an existing directory keeps its content.
	rtWrite(t, f, "vercel/sandbox/keep.txt", "kept", 0o644)
	g, err := NewFS(f.root)
	if err != nil {
		t.Fatal(err)
	}
	if b, err := g.ReadFile("keep.txt", ""); err != nil || string(b) != "kept" {
		t.Fatalf("readFile after reopening = %q, %v", b, err)
	}
}

func TestSandboxFSReadFile(t *testing.T) {
	f, parent := rtNewFS(t)
	// A host file right next to the root, which no path may reach.
	if err := os.WriteFile(filepath.Join(parent, "outside.txt"), []byte("HOST"), 0o644); err != nil {
		t.Fatal(err)
	}
	rtWrite(t, f, "vercel/sandbox/a.txt", "A", 0o644)
	rtWrite(t, f, "vercel/sandbox/sub/b.txt", "B", 0o644)
	rtWrite(t, f, "tmp/t.txt", "T", 0o644)
	rtWrite(t, f, "etc/hostname", "sbx", 0o644)
	rtWrite(t, f, "outside.txt", "SESSION", 0o644)
	rtSymlink(t, f, "vercel/sandbox/rel", "a.txt")
	rtSymlink(t, f, "vercel/sandbox/abs", "/vercel/sandbox/a.txt")
	rtSymlink(t, f, "vercel/sandbox/passwd", "/etc/passwd")
	rtSymlink(t, f, "vercel/sandbox/hostname", "/etc/hostname")
	rtSymlink(t, f, "vercel/sandbox/up", "../../../../../outside.txt")
	rtSymlink(t, f, "vercel/sandbox/hostabs", filepath.Join(parent, "outside.txt"))
	rtSymlink(t, f, "vercel/sandbox/dirlink", "/vercel")
	rtSymlink(t, f, "vercel/sandbox/loop1", "loop2")
	rtSymlink(t, f, "vercel/sandbox/loop2", "loop1")
	rtSymlink(t, f, "vercel/sandbox/dangling", "nowhere/../a.txt")
	if err := syscall.Mkfifo(filepath.Join(f.root, "vercel/sandbox/fifo"), 0o644); err != nil {
		t.Fatal(err)
	}

	const (
		notExist = "not-exist"
		invalid  = "invalid"
	)
	for _, tc := range []struct {
		name, path, cwd string
		want            string // content, or notExist / invalid
	}{
		{"relative to default cwd", "a.txt", "", "A"},
		{"absolute", "/vercel/sandbox/a.txt", "", "A"},
		{"relative to cwd", "t.txt", "/tmp", "T"},
		{"relative cwd", "b.txt", "sub", "B"},
		{"dot segments", "./sub/../a.txt", "", "A"},
		{"outside the mapped areas", "/etc/hostname", "", "sbx"},
		{"relative symlink", "rel", "", "A"},
		{"absolute symlink resolves in the session", "abs", "", "A"},
		{"symlink to host file reads the session's", "passwd", "", notExist},
		{"symlink to session file outside mapped areas", "hostname", "", "sbx"},
		{"dotdot symlink stops at the session root", "up", "", "SESSION"},
		{"symlink with a host path", "hostabs", "", notExist},
		{"symlinked directory", "dirlink/sandbox/a.txt", "", "A"},
		{"dotdot path stops at the session root", "../../../../../outside.txt", "", "SESSION"},
		{"missing", "nope.txt", "", notExist},
		{"missing directory", "/nope/x", "", notExist},
		{"through a file", "a.txt/x", "", notExist},
		{"dangling dotdot symlink", "dangling", "", notExist},
		{"symlink loop", "loop1", "", invalid},
		{"directory", "/vercel/sandbox", "", invalid},
		{"root", "/", "", invalid},
		{"fifo", "fifo", "", invalid},
		{"empty path", "", "", invalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := f.ReadFile(tc.path, tc.cwd)
			switch tc.want {
			case notExist:
				if !errors.Is(err, fs.ErrNotExist) {
					t.Fatalf("readFile(%q) = %q, %v; want fs.ErrNotExist", tc.path, b, err)
				}
			case invalid:
				if !errors.Is(err, ErrInvalidInput) {
					t.Fatalf("readFile(%q) = %q, %v; want ErrInvalidInput", tc.path, b, err)
				}
			default:
				if err != nil || string(b) != tc.want {
					t.Fatalf("readFile(%q) = %q, %v; want %q", tc.path, b, err, tc.want)
				}
			}
		})
	}
}

func TestSandboxFSMkdir(t *testing.T) {
	f, parent := rtNewFS(t)
	rtWrite(t, f, "vercel/sandbox/file", "x", 0o644)
	rtSymlink(t, f, "vercel/sandbox/abs", "/opt")
	rtSymlink(t, f, "vercel/sandbox/hostabs", parent)

	for _, tc := range []struct {
		name      string
		path, cwd string
		recursive bool
		wantErr   error  // nil, ErrInvalidInput (+ fs.ErrExist / fs.ErrNotExist)
		also      error  // second error the result must match
		created   string // host path relative to the root that must be a directory
	}{
		{name: "simple", path: "d1", created: "vercel/sandbox/d1"},
		{name: "absolute", path: "/tmp/d2", created: "tmp/d2"},
		{name: "recursive", path: "x/y/z", recursive: true, created: "vercel/sandbox/x/y/z"},
		{name: "recursive existing", path: "/vercel/sandbox", recursive: true, created: "vercel/sandbox"},
		{name: "existing", path: "/vercel/sandbox", wantErr: ErrInvalidInput, also: fs.ErrExist},
		{name: "missing parent", path: "p/q", wantErr: ErrInvalidInput, also: fs.ErrNotExist},
		{name: "file in the way", path: "file", recursive: true, wantErr: ErrInvalidInput},
		{name: "below a file", path: "file/sub", recursive: true, wantErr: ErrInvalidInput},
		{name: "root", path: "/", wantErr: ErrInvalidInput, also: fs.ErrExist},
		{name: "through absolute symlink", path: "abs/tool", recursive: true, created: "opt/tool"},
		{name: "through host-path symlink", path: "hostabs/evil", recursive: true,
			created: filepath.Join(strings.TrimPrefix(parent, "/"), "evil")},
		{name: "dotdot", path: "../../../../etc/x", recursive: true, created: "etc/x"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := f.Mkdir(tc.path, tc.cwd, tc.recursive)
			if tc.wantErr == nil && err != nil {
				t.Fatalf("mkdir(%q) = %v", tc.path, err)
			}
			if tc.wantErr != nil && !errors.Is(err, tc.wantErr) {
				t.Fatalf("mkdir(%q) = %v, want %v", tc.path, err, tc.wantErr)
			}
			if tc.also != nil && !errors.Is(err, tc.also) {
				t.Fatalf("mkdir(%q) = %v, want it to match %v too", tc.path, err, tc.also)
			}
			if tc.created != "" {
				fi, err := os.Lstat(filepath.Join(f.root, tc.created))
				if err != nil || !fi.IsDir() {
					t.Fatalf("/%s is not a directory in the session: %v", tc.created, err)
				}
			}
		})
	}
	if extra := rtEntriesOutside(t, parent, f.root); len(extra) > 0 {
		t.Fatalf("mkdir created %v outside the session root", extra)
	}
}

// rtTreeEntry describes one entry of a directory tree for comparisons.
type rtTreeEntry struct {
	mode    fs.FileMode
	content string // file content or symlink target
	uid     uint32
}

// rtTree reads the whole tree under dir without following symlinks.
func rtTree(t *testing.T, dir string) map[string]rtTreeEntry {
	t.Helper()
	out := map[string]rtTreeEntry{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		e := rtTreeEntry{mode: fi.Mode(), uid: fi.Sys().(*syscall.Stat_t).Uid}
		switch {
		case fi.Mode().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			e.content = string(b)
		case fi.Mode()&fs.ModeSymlink != 0:
			e.content, err = os.Readlink(p)
			if err != nil {
				return err
			}
		}
		out[rel] = e
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestSandboxFSSnapshotRoundTrip(t *testing.T) {
	f, parent := rtNewFS(t)
	rtWrite(t, f, "vercel/sandbox/a.txt", "hello", 0o644)
	rtWrite(t, f, "vercel/sandbox/bin/run.sh", "#!/bin/sh\necho hi\n", 0o755)
	rtWrite(t, f, "vercel/sandbox/empty", "", 0o600)
	rtWrite(t, f, "etc/hostname", "sbx", 0o644)
	rtSymlink(t, f, "vercel/sandbox/link", "/etc/hostname")
	rtSymlink(t, f, "vercel/sandbox/rel", "a.txt")
	if err := os.MkdirAll(filepath.Join(f.root, "vercel/sandbox/emptydir"), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(f.root, "vercel/sandbox/emptydir"), 0o750); err != nil {
		t.Fatal(err)
	}
	// A read-only directory with content must be restorable.
	rtWrite(t, f, "vercel/sandbox/ro/f", "in ro", 0o444)
	if err := os.Chmod(filepath.Join(f.root, "vercel/sandbox/ro"), 0o555); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(f.root, "tmp/fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	before := rtTree(t, f.root)
	delete(before, "tmp/fifo") // not part of a snapshot

	snap := filepath.Join(parent, "snap")
	size, err := f.SnapshotTo(snap)
	if err != nil {
		t.Fatal(err)
	}
	var content int64
	for _, e := range before {
		if e.mode.IsRegular() {
			content += int64(len(e.content))
		}
	}
	if want := content + int64(len(before))*snapshotEntryBytes; size != want {
		t.Errorf("snapshot size = %d, want %d (content %d + %d entries)", size, want, content, len(before))
	}

	// The snapshot is a copy: changing the session afterwards does not touch it.
	rtWrite(t, f, "vercel/sandbox/a.txt", "changed", 0o644)
	rtWrite(t, f, "vercel/sandbox/new.txt", "new", 0o644)

	g, err := RestoreFS(snap, filepath.Join(parent, "restored"))
	if err != nil {
		t.Fatal(err)
	}
	after := rtTree(t, g.root)
	if len(after) != len(before) {
		t.Errorf("restored %d entries, want %d", len(after), len(before))
	}
	for name, want := range before {
		got, ok := after[name]
		switch {
		case !ok:
			t.Errorf("%s missing after restore", name)
		case got.mode != want.mode || got.content != want.content:
			t.Errorf("%s restored as %v %q, want %v %q", name, got.mode, got.content, want.mode, want.content)
		case chownAllowed() && got.uid != want.uid:
			t.Errorf("%s restored with owner %d, want %d", name, got.uid, want.uid)
		}
	}
	if b, err := g.ReadFile("a.txt", ""); err != nil || string(b) != "hello" {
		t.Errorf("restored a.txt = %q, %v; want the snapshot's content", b, err)
	}
	if b, err := g.ReadFile("link", ""); err != nil || string(b) != "sbx" {
		t.Errorf("restored link = %q, %v", b, err)
	}
	// The restored session is independent of the snapshot, which can serve again.
	if err := g.Remove(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(g.root); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("remove left %s behind: %v", g.root, err)
	}
	h, err := RestoreFS(snap, filepath.Join(parent, "restored2"))
	if err != nil {
		t.Fatal(err)
	}
	if b, err := h.ReadFile("/vercel/sandbox/ro/f", ""); err != nil || string(b) != "in ro" {
		t.Errorf("second restore: ro/f = %q, %v", b, err)
	}
}

func TestSandboxFSRestoreOddLayout(t *testing.T) {
	// A sudo command may have replaced the standard directories; the snapshot
	// must still restore, as it was.
	f, parent := rtNewFS(t)
	for _, d := range []string{"vercel", "tmp"} {
		if err := os.RemoveAll(filepath.Join(f.root, d)); err != nil {
			t.Fatal(err)
		}
	}
	rtSymlink(t, f, "vercel", "/opt")
	rtWrite(t, f, "tmp", "not a directory", 0o644)
	snap := filepath.Join(parent, "snap")
	if _, err := f.SnapshotTo(snap); err != nil {
		t.Fatal(err)
	}
	g, err := RestoreFS(snap, filepath.Join(parent, "restored"))
	if err != nil {
		t.Fatal(err)
	}
	if target, err := os.Readlink(filepath.Join(g.root, "vercel")); err != nil || target != "/opt" {
		t.Fatalf("restored /vercel -> %q, %v", target, err)
	}
	if err := g.Mkdir("/opt/sandbox", "", true); err != nil {
		t.Fatal(err)
	}
	if err := g.ExtractTarGz("/opt/sandbox", bytes.NewReader(rtTarGz(t, rtTarEntry{name: "f", body: "x"}))); err != nil {
		t.Fatal(err)
	}
	if b, err := g.ReadFile("f", ""); err != nil || string(b) != "x" {
		t.Fatalf("readFile through the restored symlink = %q, %v", b, err)
	}
}

func TestSandboxFSSnapshotEmpty(t *testing.T) {
	parent := t.TempDir()
	f := &FS{root: filepath.Join(parent, "bare")}
	if err := os.Mkdir(f.root, 0o755); err != nil {
		t.Fatal(err)
	}
	size, err := f.SnapshotTo(filepath.Join(parent, "snap"))
	if err != nil {
		t.Fatal(err)
	}
	if size != snapshotEntryBytes {
		t.Fatalf("size of an empty tree = %d, want %d (one header)", size, snapshotEntryBytes)
	}
	// Restoring a bare snapshot still gives the standard layout.
	g, err := RestoreFS(filepath.Join(parent, "snap"), filepath.Join(parent, "restored"))
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(g.root, "vercel/sandbox")); err != nil || !fi.IsDir() {
		t.Fatalf("restored session lacks /vercel/sandbox: %v", err)
	}
}

func TestSandboxFSRemoveUnwritable(t *testing.T) {
	f, _ := rtNewFS(t)
	rtWrite(t, f, "vercel/sandbox/locked/f", "x", 0o644)
	if err := os.Chmod(filepath.Join(f.root, "vercel/sandbox/locked"), 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Remove(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(f.root); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("root still there: %v", err)
	}
}

func TestSandboxFSHostPath(t *testing.T) {
	f, _ := rtNewFS(t)
	rtSymlink(t, f, "vercel/sandbox/abs", "/tmp")
	for in, want := range map[string]string{
		"/vercel/sandbox":       "vercel/sandbox",
		"/vercel/sandbox/abs":   "tmp",
		"/../../etc":            "etc",
		"/":                     "",
		"/vercel/sandbox/a/b/c": "vercel/sandbox/a/b/c",
	} {
		got, err := f.hostPath(in)
		if err != nil || got != filepath.Join(f.root, want) {
			t.Errorf("hostPath(%q) = %q, %v; want %q", in, got, err, filepath.Join(f.root, want))
		}
	}
}

// TestSandboxFSIdleCost measures what an idle session costs in exec mode none:
// its filesystem plus one finished command. The emulator must hold 10,000 of them
// in well under 500 MB, so each must cost little heap, no goroutine and no open
// file.
func TestSandboxFSIdleCost(t *testing.T) {
	if testing.Short() {
		t.Skip("creates thousands of directories")
	}
	const n = 1000
	r, err := NewRunner(ModeNone, RunnerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	parent := t.TempDir()
	fdsBefore := rtOpenFDs(t)
	goroutinesBefore := runtime.NumGoroutine()
	var ms0, ms1, ms2 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms0)
	sessions := make([]*FS, 0, n)
	for i := 0; i < n; i++ {
		f, err := NewFS(filepath.Join(parent, "s", "sbx_"+strconv.Itoa(i)))
		if err != nil {
			t.Fatal(err)
		}
		sessions = append(sessions, f)
	}
	runtime.GC()
	runtime.ReadMemStats(&ms1)
	procs := make([]*Process, 0, n)
	for _, f := range sessions {
		p, err := r.Start(Command{FS: f, Name: "npm", Args: []string{"install"}, Env: map[string]string{"CI": "1"}})
		if err != nil {
			t.Fatal(err)
		}
		procs = append(procs, p)
	}
	runtime.GC()
	runtime.ReadMemStats(&ms2)
	perSession := float64(int64(ms1.HeapAlloc)-int64(ms0.HeapAlloc)) / n
	perCommand := float64(int64(ms2.HeapAlloc)-int64(ms1.HeapAlloc)) / n
	t.Logf("idle session filesystem: %.0f bytes of heap; finished none-mode command: %.0f bytes", perSession, perCommand)
	if perSession > 1024 || perCommand > 1024 {
		t.Errorf("idle session costs %.0f + %.0f bytes of heap, want under 1 KiB each", perSession, perCommand)
	}
	if fds := rtOpenFDs(t); fds > fdsBefore {
		t.Errorf("%d sessions hold %d more open files", n, fds-fdsBefore)
	}
	if g := runtime.NumGoroutine(); g > goroutinesBefore {
		t.Errorf("%d sessions hold %d more goroutines", n, g-goroutinesBefore)
	}
	runtime.KeepAlive(sessions)
	runtime.KeepAlive(procs)
}

// rtOpenFDs counts this process's open file descriptors.
func rtOpenFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip("no /proc/self/fd")
	}
	return len(ents)
}
