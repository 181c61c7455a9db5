package vercel

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
)

type tarEntry struct {
	name    string
	mode    int64
	typ     byte
	content string
}

func readTarGz(t *testing.T, b []byte) []tarEntry {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("not gzip: %v", err)
	}
	tr := tar.NewReader(zr)
	var out []tarEntry
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatalf("bad tar: %v", err)
		}
		c, _ := io.ReadAll(tr)
		out = append(out, tarEntry{h.Name, h.Mode, h.Typeflag, string(c)})
	}
}

// TestWriteFilesLayout checks the upload against
// docs/dev/vercel-sandbox-api.md §5.9 and §9b: gzip'd tar, x-cwd "/", entry
// names relative to "/", relative paths under /vercel/sandbox, one regular
// entry per file and no directory entries.
func TestWriteFilesLayout(t *testing.T) {
	f := newFakeAPI(t, func(w http.ResponseWriter, r *http.Request, n int, body []byte) { writeJSON(w, 200, map[string]any{}) })
	c, _ := newTestClient(t, f, nil)
	long := strings.Repeat("d/", 80) + "deep.txt" // > 100 bytes: needs a PAX header
	files := []File{
		{Path: "hello.txt", Content: []byte("hi")},
		{Path: "bin/run.sh", Content: []byte("#!/bin/sh\n"), Mode: 0o755},
		{Path: "/etc/app/../app/conf", Content: []byte("k=v"), Mode: 0o600},
		{Path: "./a//b/", Content: nil},
		{Path: long, Content: []byte("deep")},
	}
	if err := c.WriteFiles(context.Background(), "sbx_1", files); err != nil {
		t.Fatal(err)
	}
	r := f.requests()[0]
	if r.Method != "POST" || r.Path != "/v2/sandboxes/sessions/sbx_1/fs/write" {
		t.Errorf("request %s %s", r.Method, r.Path)
	}
	if ct := r.Header.Get("Content-Type"); ct != "application/gzip" {
		t.Errorf("Content-Type = %q", ct)
	}
	if cwd := r.Header.Get("X-Cwd"); cwd != "/" {
		t.Errorf("x-cwd = %q", cwd)
	}
	want := []tarEntry{
		{"vercel/sandbox/hello.txt", 0o644, tar.TypeReg, "hi"},
		{"vercel/sandbox/bin/run.sh", 0o755, tar.TypeReg, "#!/bin/sh\n"},
		{"etc/app/conf", 0o600, tar.TypeReg, "k=v"},
		{"vercel/sandbox/a/b", 0o644, tar.TypeReg, ""},
		{"vercel/sandbox/" + long, 0o644, tar.TypeReg, "deep"},
	}
	got := readTarGz(t, r.Body)
	if len(got) != len(want) {
		t.Fatalf("entries %+v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("entry %d = %+v, want %+v", i, got[i], want[i])
		}
	}
}

func TestWriteFilesNothingToDo(t *testing.T) {
	f := newFakeAPI(t, func(w http.ResponseWriter, r *http.Request, n int, body []byte) { writeJSON(w, 200, map[string]any{}) })
	c, _ := newTestClient(t, f, nil)
	if err := c.WriteFiles(context.Background(), "sbx_1", nil); err != nil || f.count() != 0 {
		t.Errorf("err %v, %d requests", err, f.count())
	}
}

func TestReadFile(t *testing.T) {
	content := []byte{0, 1, 2, 0xff, '\n'}
	f := newFakeAPI(t, func(w http.ResponseWriter, r *http.Request, n int, body []byte) {
		switch {
		case strings.Contains(string(body), "missing"):
			// Vercel's mock sends an empty body (docs/dev/vercel-sandbox-api.md §5.9).
			w.WriteHeader(404)
		case strings.Contains(string(body), "json"):
			writeJSON(w, 200, map[string]any{})
		default:
			w.Header().Set("Content-Type", "application/octet-stream")
			w.Header().Set("Content-Disposition", `attachment; filename="a.bin"`)
			w.Write(content)
		}
	})
	c, _ := newTestClient(t, f, nil)
	ctx := context.Background()
	got, err := c.ReadFile(ctx, "sbx_1", "/tmp/a.bin", "")
	if err != nil || !bytes.Equal(got, content) {
		t.Fatalf("ReadFile = %v, %v", got, err)
	}
	_, err = c.ReadFile(ctx, "sbx_1", "missing", "")
	var ae *APIError
	if !IsNotFound(err) || !errors.As(err, &ae) || ae.Endpoint != EPReadFile {
		t.Errorf("missing file: %v", err)
	}
	if n := f.count(); n != 2 {
		t.Errorf("404 was retried: %d requests", n)
	}
	_, err = c.ReadFile(ctx, "sbx_1", "json", "")
	var pe *ProtocolError
	if !errors.As(err, &pe) {
		t.Errorf("wrong content type accepted: %v", err)
	}
}
