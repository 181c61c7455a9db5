package sandboxruntime

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// rtTarEntry is one entry of a test upload.
type rtTarEntry struct {
	name     string
	typ      byte // tar.TypeReg when 0
	mode     int64
	body     string
	linkname string
	format   tar.Format
	pax      map[string]string
}

// rtTarGz builds a gzip-compressed tar stream like the SDK's fs/write body.
func rtTarGz(t testing.TB, entries ...rtTarEntry) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for _, e := range entries {
		typ := e.typ
		if typ == 0 {
			typ = tar.TypeReg
		}
		mode := e.mode
		if mode == 0 {
			mode = 0o644
		}
		hdr := &tar.Header{
			Name: e.name, Typeflag: typ, Mode: mode, Linkname: e.linkname,
			ModTime: time.Unix(1700000000, 0), Format: e.format, PAXRecords: e.pax,
		}
		if typ == tar.TypeReg {
			hdr.Size = int64(len(e.body))
		}
		if typ == tar.TypeXGlobalHeader {
			hdr = &tar.Header{Typeflag: typ, PAXRecords: e.pax}
		}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatalf("write header %q: %v", e.name, err)
		}
		if typ == tar.TypeReg {
			if _, err := tw.Write([]byte(e.body)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// rtGz gzips raw bytes (for hand-made, possibly broken tar streams).
func rtGz(b []byte) []byte {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write(b)
	zw.Close()
	return buf.Bytes()
}

// rtRawEntry is an entry of a hand-made tar stream, for headers archive/tar
// refuses to write.
type rtRawEntry struct {
	name string
	typ  byte
	body string
}

// rtRawTar writes ustar header blocks by hand, followed by each body padded to
// the block size, and the end-of-archive marker.
func rtRawTar(entries ...rtRawEntry) []byte {
	var out bytes.Buffer
	for _, e := range entries {
		var blk [512]byte
		copy(blk[0:100], e.name)
		copy(blk[100:108], "0000644\x00")
		copy(blk[108:116], "0000000\x00")
		copy(blk[116:124], "0000000\x00")
		copy(blk[124:136], fmt.Sprintf("%011o\x00", len(e.body)))
		copy(blk[136:148], "00000000000\x00")
		blk[156] = e.typ
		copy(blk[257:265], "ustar\x0000")
		copy(blk[148:156], "        ")
		sum := 0
		for _, b := range blk {
			sum += int(b)
		}
		copy(blk[148:156], fmt.Sprintf("%06o\x00 ", sum))
		out.Write(blk[:])
		out.WriteString(e.body)
		if pad := len(e.body) % 512; pad != 0 {
			out.Write(make([]byte, 512-pad))
		}
	}
	out.Write(make([]byte, 1024))
	return out.Bytes()
}

// rtPAXRecords encodes key, value pairs as PAX extended header records.
func rtPAXRecords(kv ...string) string {
	var b strings.Builder
	for i := 0; i+1 < len(kv); i += 2 {
		rec := " " + kv[i] + "=" + kv[i+1] + "\n"
		n := len(rec) + 1
		for len(fmt.Sprint(n))+len(rec) != n {
			n = len(fmt.Sprint(n)) + len(rec)
		}
		b.WriteString(fmt.Sprint(n) + rec)
	}
	return b.String()
}

// rtFile is an expected file (or directory, or symlink) after an extraction.
type rtFile struct {
	path    string // host path relative to the session root
	content string // file content or symlink target
	mode    fs.FileMode
	// preexisting files were not written by the upload (so keep their owner).
	preexisting bool
}

func TestTarExtract(t *testing.T) {
	longName := "vercel/sandbox/" + strings.Repeat("d", 120) + "/" + strings.Repeat("f", 120) + ".txt"
	cases := []struct {
		name    string
		cwd     string
		setup   func(t *testing.T, f *FS, parent string)
		body    []byte
		wantErr bool
		want    []rtFile
		gone    []string // must not exist afterwards
	}{
		{
			name: "sdk style upload from /",
			cwd:  "/",
			body: rtTarGz(t, rtTarEntry{name: "vercel/sandbox/hello.txt", body: "hi"}),
			want: []rtFile{{path: "vercel/sandbox/hello.txt", content: "hi", mode: 0o644}},
		},
		{
			name: "default cwd",
			body: rtTarGz(t, rtTarEntry{name: "hello.txt", body: "hi"}),
			want: []rtFile{{path: "vercel/sandbox/hello.txt", content: "hi", mode: 0o644}},
		},
		{
			name: "relative cwd",
			cwd:  "sub/dir",
			body: rtTarGz(t, rtTarEntry{name: "f", body: "x"}),
			want: []rtFile{{path: "vercel/sandbox/sub/dir/f", content: "x", mode: 0o644}},
		},
		{
			name: "tmp",
			cwd:  "/tmp",
			body: rtTarGz(t, rtTarEntry{name: "f", body: "tmp file"}),
			want: []rtFile{{path: "tmp/f", content: "tmp file", mode: 0o644}},
		},
		{
			name: "parents created, mode applied",
			cwd:  "/",
			body: rtTarGz(t, rtTarEntry{name: "usr/local/bin/tool", body: "#!/bin/sh\n", mode: 0o755}),
			want: []rtFile{
				{path: "usr/local/bin", mode: fs.ModeDir | 0o755},
				{path: "usr/local/bin/tool", content: "#!/bin/sh\n", mode: 0o755},
			},
		},
		{
			name: "setuid and setgid dropped, sticky kept",
			body: rtTarGz(t,
				rtTarEntry{name: "suid", body: "x", mode: 0o6755},
				rtTarEntry{name: "sticky", typ: tar.TypeDir, mode: 0o1777}),
			want: []rtFile{
				{path: "vercel/sandbox/suid", content: "x", mode: 0o755},
				{path: "vercel/sandbox/sticky", mode: fs.ModeDir | fs.ModeSticky | 0o777},
			},
		},
		{
			name: "directory entries, read-only directory filled",
			body: rtTarGz(t,
				rtTarEntry{name: "./", typ: tar.TypeDir, mode: 0o755},
				rtTarEntry{name: "ro/", typ: tar.TypeDir, mode: 0o555},
				rtTarEntry{name: "ro/f", body: "in ro"}),
			want: []rtFile{
				{path: "vercel/sandbox", mode: fs.ModeDir | 0o755},
				{path: "vercel/sandbox/ro", mode: fs.ModeDir | 0o555},
				{path: "vercel/sandbox/ro/f", content: "in ro", mode: 0o644},
			},
		},
		{
			name: "PAX long name",
			cwd:  "/",
			body: rtTarGz(t, rtTarEntry{name: longName, body: "long", format: tar.FormatPAX}),
			want: []rtFile{{path: longName, content: "long", mode: 0o644}},
		},
		{
			name: "GNU long name",
			cwd:  "/",
			body: rtTarGz(t, rtTarEntry{name: longName, body: "long", format: tar.FormatGNU}),
			want: []rtFile{{path: longName, content: "long", mode: 0o644}},
		},
		{
			name:  "overwrite",
			setup: func(t *testing.T, f *FS, _ string) { rtWrite(t, f, "vercel/sandbox/a", "old content", 0o600) },
			body:  rtTarGz(t, rtTarEntry{name: "a", body: "new"}),
			want:  []rtFile{{path: "vercel/sandbox/a", content: "new", mode: 0o644}},
		},
		{
			name: "existing symlink at the file's path is replaced, not followed",
			setup: func(t *testing.T, f *FS, parent string) {
				rtWrite(t, f, "vercel/sandbox/target", "keep", 0o644)
				rtSymlink(t, f, "vercel/sandbox/rel", "target")
				rtSymlink(t, f, "vercel/sandbox/abs", filepath.Join(parent, "outside"))
			},
			body: rtTarGz(t, rtTarEntry{name: "rel", body: "r"}, rtTarEntry{name: "abs", body: "a"}),
			want: []rtFile{
				{path: "vercel/sandbox/target", content: "keep", mode: 0o644, preexisting: true},
				{path: "vercel/sandbox/rel", content: "r", mode: 0o644},
				{path: "vercel/sandbox/abs", content: "a", mode: 0o644},
			},
		},
		{
			name:  "write through a symlink that stays inside",
			setup: func(t *testing.T, f *FS, _ string) { rtSymlink(t, f, "vercel/sandbox/t", "../../tmp") },
			body:  rtTarGz(t, rtTarEntry{name: "t/f", body: "via link"}),
			want:  []rtFile{{path: "tmp/f", content: "via link", mode: 0o644}},
		},
		{
			name: "relative symlink entries",
			body: rtTarGz(t,
				rtTarEntry{name: "l1", typ: tar.TypeSymlink, linkname: "a.txt"},
				rtTarEntry{name: "l2", typ: tar.TypeSymlink, linkname: "../../tmp/x"},
				rtTarEntry{name: "d/l3", typ: tar.TypeSymlink, linkname: "../l1"}),
			want: []rtFile{
				{path: "vercel/sandbox/l1", content: "a.txt", mode: fs.ModeSymlink},
				{path: "vercel/sandbox/l2", content: "../../tmp/x", mode: fs.ModeSymlink},
				{path: "vercel/sandbox/d/l3", content: "../l1", mode: fs.ModeSymlink},
			},
		},
		{
			name: "file then symlink then file through it",
			body: rtTarGz(t,
				rtTarEntry{name: "real/", typ: tar.TypeDir, mode: 0o755},
				rtTarEntry{name: "link", typ: tar.TypeSymlink, linkname: "real"},
				rtTarEntry{name: "link/f", body: "through"}),
			want: []rtFile{{path: "vercel/sandbox/real/f", content: "through", mode: 0o644}},
		},
		{
			name: "global PAX header ignored",
			body: rtTarGz(t,
				rtTarEntry{name: "pax_global_header", typ: tar.TypeXGlobalHeader, pax: map[string]string{"comment": "x"}, format: tar.FormatPAX},
				rtTarEntry{name: "f", body: "x"}),
			want: []rtFile{{path: "vercel/sandbox/f", content: "x", mode: 0o644}},
		},
		{
			name: "empty archive",
			body: rtTarGz(t),
		},

		// Refused.
		{name: "dotdot name", cwd: "/", body: rtTarGz(t, rtTarEntry{name: "../evil", body: "x"}), wantErr: true},
		{name: "dotdot inside name", body: rtTarGz(t, rtTarEntry{name: "a/../../../../evil", body: "x"}), wantErr: true},
		{name: "dotdot that would stay inside", body: rtTarGz(t, rtTarEntry{name: "a/../b", body: "x"}), wantErr: true},
		{name: "absolute name", body: rtTarGz(t, rtTarEntry{name: "/etc/evil", body: "x"}), wantErr: true},
		{name: "absolute symlink", body: rtTarGz(t, rtTarEntry{name: "l", typ: tar.TypeSymlink, linkname: "/etc/passwd"}), wantErr: true},
		{
			name:    "escaping symlink",
			body:    rtTarGz(t, rtTarEntry{name: "l", typ: tar.TypeSymlink, linkname: "../../../outside"}),
			wantErr: true, gone: []string{"vercel/sandbox/l"},
		},
		{
			name:    "escaping symlink via inner dotdot",
			cwd:     "/",
			body:    rtTarGz(t, rtTarEntry{name: "l", typ: tar.TypeSymlink, linkname: "x/../../y"}),
			wantErr: true,
		},
		{
			name: "symlink then write through it",
			body: rtTarGz(t,
				rtTarEntry{name: "l", typ: tar.TypeSymlink, linkname: "../../.."},
				rtTarEntry{name: "l/evil", body: "x"}),
			wantErr: true,
		},
		{
			name:    "write through existing absolute symlink",
			setup:   func(t *testing.T, f *FS, parent string) { rtSymlink(t, f, "vercel/sandbox/out", parent) },
			body:    rtTarGz(t, rtTarEntry{name: "out/evil", body: "x"}),
			wantErr: true,
		},
		{
			name:    "write through existing escaping symlink",
			setup:   func(t *testing.T, f *FS, _ string) { rtSymlink(t, f, "vercel/sandbox/up", "../../../..") },
			body:    rtTarGz(t, rtTarEntry{name: "up/evil", body: "x"}),
			wantErr: true,
		},
		{
			name:    "x-cwd through existing absolute symlink",
			cwd:     "/vercel/sandbox/out",
			setup:   func(t *testing.T, f *FS, parent string) { rtSymlink(t, f, "vercel/sandbox/out", parent) },
			body:    rtTarGz(t, rtTarEntry{name: "evil", body: "x"}),
			wantErr: true,
		},
		{name: "hard link", body: rtTarGz(t, rtTarEntry{name: "a", body: "x"}, rtTarEntry{name: "h", typ: tar.TypeLink, linkname: "a"}), wantErr: true},
		{name: "char device", body: rtTarGz(t, rtTarEntry{name: "c", typ: tar.TypeChar}), wantErr: true},
		{name: "block device", body: rtTarGz(t, rtTarEntry{name: "b", typ: tar.TypeBlock}), wantErr: true},
		{name: "fifo", body: rtTarGz(t, rtTarEntry{name: "p", typ: tar.TypeFifo}), wantErr: true},
		{
			name: "PAX sparse file",
			body: rtGz(rtRawTar(
				rtRawEntry{name: "PaxHeaders/s", typ: tar.TypeXHeader, body: rtPAXRecords(
					"GNU.sparse.major", "1", "GNU.sparse.minor", "0", "GNU.sparse.name", "s", "GNU.sparse.realsize", "1099511627776")},
				rtRawEntry{name: "s", typ: tar.TypeReg, body: "1\n0\n1\n" + strings.Repeat("\x00", 506) + "x"})),
			wantErr: true,
		},
		{
			name:    "old GNU sparse file",
			body:    rtGz(rtRawTar(rtRawEntry{name: "s", typ: tar.TypeGNUSparse, body: ""})),
			wantErr: true,
		},
		{
			name:    "file where a directory is",
			setup:   func(t *testing.T, f *FS, _ string) { rtWrite(t, f, "vercel/sandbox/d/x", "", 0o644) },
			body:    rtTarGz(t, rtTarEntry{name: "d", body: "x"}),
			wantErr: true,
		},
		{
			name:    "file below a file",
			setup:   func(t *testing.T, f *FS, _ string) { rtWrite(t, f, "vercel/sandbox/file", "", 0o644) },
			body:    rtTarGz(t, rtTarEntry{name: "file/x", body: "x"}),
			wantErr: true,
		},
		{name: "not gzip", body: []byte("plain text"), wantErr: true},
		{name: "corrupt tar", body: rtGz(bytes.Repeat([]byte{0xff}, 1024)), wantErr: true},
		{name: "truncated gzip", body: rtTarGz(t, rtTarEntry{name: "f", body: strings.Repeat("x", 5000)})[:40], wantErr: true},
		{
			name: "truncated tar body",
			body: func() []byte {
				var raw bytes.Buffer
				tw := tar.NewWriter(&raw)
				tw.WriteHeader(&tar.Header{Name: "f", Mode: 0o644, Size: 10000, Typeflag: tar.TypeReg})
				tw.Write([]byte("short"))
				return rtGz(raw.Bytes()[:512+5])
			}(),
			wantErr: true,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f, parent := rtNewFS(t)
			if tc.setup != nil {
				tc.setup(t, f, parent)
			}
			err := f.ExtractTarGz(tc.cwd, bytes.NewReader(tc.body))
			if tc.wantErr {
				if !errors.Is(err, ErrInvalidInput) {
					t.Fatalf("extractTarGz = %v, want ErrInvalidInput", err)
				}
			} else if err != nil {
				t.Fatalf("extractTarGz = %v", err)
			}
			for _, w := range tc.want {
				host := filepath.Join(f.root, filepath.FromSlash(w.path))
				fi, err := os.Lstat(host)
				if err != nil {
					t.Fatalf("/%s: %v", w.path, err)
				}
				if got := fi.Mode() & (fs.ModeType | fs.ModePerm | fs.ModeSticky | fs.ModeSetuid | fs.ModeSetgid); w.mode&fs.ModeSymlink == 0 && got != w.mode {
					t.Errorf("/%s: mode %v, want %v", w.path, got, w.mode)
				}
				switch {
				case fi.Mode()&fs.ModeSymlink != 0:
					if target, _ := os.Readlink(host); target != w.content {
						t.Errorf("/%s -> %q, want -> %q", w.path, target, w.content)
					}
				case fi.Mode().IsRegular():
					if b, _ := os.ReadFile(host); string(b) != w.content {
						t.Errorf("/%s = %q, want %q", w.path, b, w.content)
					}
					if chownAllowed() && !w.preexisting && int(fi.Sys().(*syscall.Stat_t).Uid) != sandboxUser().uid {
						t.Errorf("/%s not owned by the sandbox user", w.path)
					}
				}
			}
			for _, g := range tc.gone {
				if _, err := os.Lstat(filepath.Join(f.root, g)); err == nil {
					t.Errorf("/%s exists", g)
				}
			}
			if extra := rtEntriesOutside(t, parent, f.root); len(extra) > 0 {
				t.Fatalf("extraction created %v outside the session root", extra)
			}
		})
	}
}

func TestTarExtractBudget(t *testing.T) {
	old := maxExtractBytes
	maxExtractBytes = 100
	defer func() { maxExtractBytes = old }()
	f, _ := rtNewFS(t)
	err := f.ExtractTarGz("", bytes.NewReader(rtTarGz(t,
		rtTarEntry{name: "a", body: strings.Repeat("a", 60)},
		rtTarEntry{name: "b", body: strings.Repeat("b", 60)})))
	if !errors.Is(err, ErrInvalidInput) {
		t.Fatalf("extractTarGz over budget = %v, want ErrInvalidInput", err)
	}
}

func TestTarExtractThenReadFile(t *testing.T) {
	f, _ := rtNewFS(t)
	body := rtTarGz(t,
		rtTarEntry{name: "vercel/sandbox/hello.txt", body: "hello"},
		rtTarEntry{name: "etc/app.conf", body: "conf"})
	if err := f.ExtractTarGz("/", bytes.NewReader(body)); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]string{"hello.txt": "hello", "/vercel/sandbox/hello.txt": "hello", "/etc/app.conf": "conf"} {
		if b, err := f.ReadFile(p, ""); err != nil || string(b) != want {
			t.Errorf("readFile(%q) = %q, %v; want %q", p, b, err, want)
		}
	}
}

func TestCopyDir(t *testing.T) {
	host := t.TempDir()
	for p, body := range map[string]string{"a.txt": "hello", "sub/b.sh": "#!/bin/sh\n"} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(host, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(host, p), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []string{"sub", "sub/b.sh"} {
		if err := os.Chmod(filepath.Join(host, p), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("a.txt", filepath.Join(host, "rel")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc/passwd", filepath.Join(host, "abs")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(host, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}

	f, parent := rtNewFS(t)
	if err := f.CopyDir(host, ""); err != nil {
		t.Fatal(err)
	}
	if err := f.CopyDir(host, "/opt/copy"); err != nil {
		t.Fatal(err)
	}
	for _, base := range []string{"vercel/sandbox", "opt/copy"} {
		got := rtTree(t, filepath.Join(f.root, base))
		want := map[string]rtTreeEntry{
			".":        {mode: fs.ModeDir | 0o755},
			"a.txt":    {mode: 0o644, content: "hello"},
			"sub":      {mode: fs.ModeDir | 0o755},
			"sub/b.sh": {mode: 0o755, content: "#!/bin/sh\n"},
			"rel":      {mode: fs.ModeSymlink | 0o777, content: "a.txt"},
		}
		for name, w := range want {
			g, ok := got[name]
			if !ok {
				t.Errorf("%s/%s: missing after CopyDir", base, name)
				continue
			}
			if g.mode != w.mode || g.content != w.content {
				t.Errorf("%s/%s: mode %v content %q, want mode %v content %q", base, name, g.mode, g.content, w.mode, w.content)
			}
		}
		for name := range got {
			if _, ok := want[name]; !ok {
				t.Errorf("%s/%s: copied, but absolute symlinks and FIFOs must be left out", base, name)
			}
		}
	}
	if b, err := f.ReadFile("rel", ""); err != nil || string(b) != "hello" {
		t.Errorf("ReadFile(rel) = %q, %v; want hello", b, err)
	}
	if extra := rtEntriesOutside(t, parent, f.root); len(extra) > 0 {
		t.Errorf("CopyDir wrote outside the session root: %v", extra)
	}
	if err := f.CopyDir(filepath.Join(host, "missing"), ""); err == nil {
		t.Error("CopyDir of a missing host directory succeeded")
	}
}

// rtFuzzTraps prepares a session whose root holds symlinks that lead out of it,
// the ways an earlier command could have left them, and returns the directory
// outside the root that they point to.
func rtFuzzTraps(t testing.TB, f *FS, parent string) {
	outside := filepath.Join(parent, "outside")
	if err := os.Mkdir(outside, 0o755); err != nil {
		t.Fatal(err)
	}
	for link, target := range map[string]string{
		"vercel/sandbox/abs":  outside,
		"vercel/sandbox/up":   "../../../outside",
		"vercel/sandbox/root": "/",
		"tmp/up":              "../../outside",
		"trap":                outside,
	} {
		if err := os.Symlink(target, filepath.Join(f.root, link)); err != nil {
			t.Fatal(err)
		}
	}
}

// FuzzExtractTarGz extracts arbitrary uploads into a session whose root contains
// symlinks leading out of it, and checks that nothing is ever created outside the
// root, whatever the upload and whether or not it is refused.
func FuzzExtractTarGz(f *testing.F) {
	for _, seed := range rtFuzzSeeds(f) {
		f.Add(seed.cwd, seed.body)
	}
	old := maxExtractBytes
	maxExtractBytes = 1 << 20
	f.Cleanup(func() { maxExtractBytes = old })
	f.Fuzz(func(t *testing.T, cwd string, body []byte) {
		parent := t.TempDir()
		sfs, err := NewFS(filepath.Join(parent, "root"))
		if err != nil {
			t.Fatal(err)
		}
		rtFuzzTraps(t, sfs, parent)
		err = sfs.ExtractTarGz(cwd, bytes.NewReader(body))
		if err != nil && !errors.Is(err, ErrInvalidInput) && !strings.Contains(err.Error(), "file name too long") {
			// Only the request may be at fault, save for names the filesystem cannot store.
			var pe *fs.PathError
			if !errors.As(err, &pe) {
				t.Fatalf("extractTarGz error is not a request error: %v", err)
			}
		}
		if extra := rtEntriesOutside(t, parent, sfs.root, "outside"); len(extra) > 0 {
			t.Fatalf("extraction created %v outside the session root (err %v)", extra, err)
		}
		if ents, _ := os.ReadDir(filepath.Join(parent, "outside")); len(ents) > 0 {
			t.Fatalf("extraction wrote %v through a symlink out of the root (err %v)", ents, err)
		}
	})
}

// rtFuzzSeed is one seed of FuzzExtractTarGz.
type rtFuzzSeed struct {
	name string
	cwd  string
	body []byte
}

// rtFuzzSeeds returns the seed uploads of FuzzExtractTarGz: the SDK's usual
// uploads and every escape vector of TestTarExtract, aimed at the traps.
func rtFuzzSeeds(t testing.TB) []rtFuzzSeed {
	return []rtFuzzSeed{
		{"sdk", "/", rtTarGz(t, rtTarEntry{name: "vercel/sandbox/hello.txt", body: "hi"}, rtTarEntry{name: "usr/local/bin/x", body: "#!/bin/sh\n", mode: 0o755})},
		{"dirs", "", rtTarGz(t, rtTarEntry{name: "d/", typ: tar.TypeDir, mode: 0o555}, rtTarEntry{name: "d/f", body: "x"})},
		{"long", "/", rtTarGz(t, rtTarEntry{name: strings.Repeat("n/", 80) + "f", body: "x", format: tar.FormatPAX})},
		{"gnulong", "/tmp", rtTarGz(t, rtTarEntry{name: strings.Repeat("g", 150), body: "x", format: tar.FormatGNU})},
		{"dotdot", "/", rtTarGz(t, rtTarEntry{name: "../outside/evil", body: "x"})},
		{"absname", "", rtTarGz(t, rtTarEntry{name: "/outside/evil", body: "x"})},
		{"abslink", "", rtTarGz(t, rtTarEntry{name: "l", typ: tar.TypeSymlink, linkname: "/"}, rtTarEntry{name: "l/evil", body: "x"})},
		{"uplink", "", rtTarGz(t, rtTarEntry{name: "l", typ: tar.TypeSymlink, linkname: "../../../outside"}, rtTarEntry{name: "l/evil", body: "x"})},
		{"trap-abs", "", rtTarGz(t, rtTarEntry{name: "abs/evil", body: "x"})},
		{"trap-up", "", rtTarGz(t, rtTarEntry{name: "up/evil", body: "x"})},
		{"trap-root", "", rtTarGz(t, rtTarEntry{name: "root/evil", body: "x"})},
		{"trap-cwd", "/trap", rtTarGz(t, rtTarEntry{name: "evil", body: "x"})},
		{"trap-tmp-cwd", "/tmp/up", rtTarGz(t, rtTarEntry{name: "evil", body: "x"})},
		{"trap-replace", "", rtTarGz(t, rtTarEntry{name: "abs", body: "replaced"}, rtTarEntry{name: "up", typ: tar.TypeDir})},
		{"hardlink", "", rtTarGz(t, rtTarEntry{name: "h", typ: tar.TypeLink, linkname: "../../../outside/evil"})},
		{"fifo", "", rtTarGz(t, rtTarEntry{name: "p", typ: tar.TypeFifo})},
		{"cwd-dotdot", "/../../outside", rtTarGz(t, rtTarEntry{name: "evil", body: "x"})},
		{"empty", "", rtTarGz(t)},
		{"garbage", "", []byte("not a gzip stream")},
	}
}

// TestTarWriteFuzzSeeds regenerates the committed seed corpus of FuzzExtractTarGz
// when RT_WRITE_FUZZ_SEEDS=1.
func TestTarWriteFuzzSeeds(t *testing.T) {
	if os.Getenv("RT_WRITE_FUZZ_SEEDS") != "1" {
		t.Skip("set RT_WRITE_FUZZ_SEEDS=1 to regenerate testdata/fuzz/FuzzExtractTarGz")
	}
	dir := filepath.Join("testdata", "fuzz", "FuzzExtractTarGz")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, s := range rtFuzzSeeds(t) {
		content := fmt.Sprintf("go test fuzz v1\nstring(%q)\n[]byte(%q)\n", s.cwd, s.body)
		if err := os.WriteFile(filepath.Join(dir, "seed-"+s.name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestTarExtractLimits: entries, per-file content and the decompressed stream
// are capped; what is refused stops the extraction with ErrInvalidInput.
func TestTarExtractLimits(t *testing.T) {
	lim := TarLimits{MaxEntries: 10, MaxBytes: 512, MaxFileBytes: 100}
	pax := strings.Repeat("x", 900<<10) // a 900 KiB PAX record: header bytes, no content
	for _, tc := range []struct {
		name    string
		entries []rtTarEntry
		want    string
	}{
		{"entries", func() []rtTarEntry {
			var es []rtTarEntry
			for i := range 11 {
				es = append(es, rtTarEntry{name: fmt.Sprintf("f%d", i)})
			}
			return es
		}(), "more than 10 entries"},
		{"file", []rtTarEntry{{name: "big", body: strings.Repeat("x", 101)}}, "per file"},
		{"total", []rtTarEntry{
			{name: "a", body: strings.Repeat("x", 100)}, {name: "b", body: strings.Repeat("x", 100)},
			{name: "c", body: strings.Repeat("x", 100)}, {name: "d", body: strings.Repeat("x", 100)},
			{name: "e", body: strings.Repeat("x", 100)}, {name: "f", body: strings.Repeat("x", 100)},
		}, "exceeds 512 bytes"},
		{"header flood", []rtTarEntry{
			{name: "p1", pax: map[string]string{"comment": pax}}, {name: "p2", pax: map[string]string{"comment": pax}},
			{name: "p3", pax: map[string]string{"comment": pax}},
		}, "decompressed bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, _ := rtNewFS(t)
			err := f.ExtractTarGzLimited("", bytes.NewReader(rtTarGz(t, tc.entries...)), lim)
			if !errors.Is(err, ErrInvalidInput) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want ErrInvalidInput with %q", err, tc.want)
			}
		})
	}
	// Within the limits everything is written.
	f, _ := rtNewFS(t)
	if err := f.ExtractTarGzLimited("", bytes.NewReader(rtTarGz(t, rtTarEntry{name: "ok", body: "fine"})), lim); err != nil {
		t.Fatal(err)
	}
	if b, err := f.ReadFile("ok", ""); err != nil || string(b) != "fine" {
		t.Fatalf("ok: %q %v", b, err)
	}
}
