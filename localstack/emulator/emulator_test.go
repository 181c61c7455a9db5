package emulator

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/getsentry/sandbox-controller/internal/vercel"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const testToken = "test-token"

// t0 is the fake clock's start.
var t0 = time.Date(2026, 10, 1, 12, 0, 0, 0, time.UTC)

type tenv struct {
	t   *testing.T
	e   *Emulator
	srv *httptest.Server
	clk *FakeClock
	hc  *http.Client
	tok string
}

// newEnv starts an emulator (exec mode "none" and a fake clock unless opts
// says otherwise) behind an httptest server.
func newEnv(t *testing.T, opts Options) *tenv {
	t.Helper()
	if opts.Token == "" {
		opts.Token = testToken
	}
	if opts.Exec == "" {
		opts.Exec = "none"
	}
	te := &tenv{t: t, tok: opts.Token}
	if opts.Clock == nil {
		te.clk = NewFakeClock(t0)
		opts.Clock = te.clk
	} else if fc, ok := opts.Clock.(*FakeClock); ok {
		te.clk = fc
	}
	e, err := New(opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	te.e = e
	te.srv = httptest.NewServer(e.Handler())
	tr := &http.Transport{}
	te.hc = &http.Client{Transport: tr}
	t.Cleanup(func() {
		if err := e.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		te.srv.Close()
		tr.CloseIdleConnections()
	})
	return te
}

type resp struct {
	status int
	header http.Header
	body   []byte
}

func (r resp) json(t *testing.T, out any) {
	t.Helper()
	if err := json.Unmarshal(r.body, out); err != nil {
		t.Fatalf("decode %s: %v", r.body, err)
	}
}

func (r resp) errCode() string {
	var env vercel.ErrorEnvelope
	_ = json.Unmarshal(r.body, &env)
	return env.Error.Code
}

func (r resp) errMessage() string {
	var env vercel.ErrorEnvelope
	_ = json.Unmarshal(r.body, &env)
	return env.Error.Message
}

// req sends a request with the test token. body may be nil, a string/[]byte
// (sent raw) or any value (JSON-encoded).
func (te *tenv) req(method, path string, body any) resp {
	return te.reqTok(te.tok, method, path, body)
}

func (te *tenv) reqTok(tok, method, path string, body any) resp {
	te.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		buf, err := json.Marshal(b)
		if err != nil {
			te.t.Fatal(err)
		}
		rd = bytes.NewReader(buf)
	}
	r, err := http.NewRequest(method, te.srv.URL+path, rd)
	if err != nil {
		te.t.Fatal(err)
	}
	if tok != "" {
		r.Header.Set("Authorization", "Bearer "+tok)
	}
	r.Header.Set("Content-Type", "application/json")
	res, err := te.hc.Do(r)
	if err != nil {
		te.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		te.t.Fatalf("%s %s: read: %v", method, path, err)
	}
	return resp{status: res.StatusCode, header: res.Header, body: raw}
}

// must sends a request and fails the test unless it answers want.
func (te *tenv) must(want int, method, path string, body any, out any) resp {
	te.t.Helper()
	r := te.req(method, path, body)
	if r.status != want {
		te.t.Fatalf("%s %s: status %d, want %d: %s", method, path, r.status, want, r.body)
	}
	if out != nil {
		r.json(te.t, out)
	}
	return r
}

const prj = "?projectId=prj_emulator"

// create makes a sandbox through POST /v3/sandboxes.
func (te *tenv) create(body map[string]any) vercel.SandboxResponse {
	te.t.Helper()
	if body == nil {
		body = map[string]any{}
	}
	if _, ok := body["projectId"]; !ok {
		body["projectId"] = "prj_emulator"
	}
	var out vercel.SandboxResponse
	te.must(200, "POST", "/v3/sandboxes", body, &out)
	return out
}

func (te *tenv) getSandbox(name string, resume bool) (resp, sandboxAndSession) {
	te.t.Helper()
	path := "/v2/sandboxes/" + name + prj
	if resume {
		path += "&resume=true"
	}
	r := te.req("GET", path, nil)
	var out sandboxAndSession
	if r.status == 200 {
		r.json(te.t, &out)
	}
	return r, out
}

func (te *tenv) session(id string) vercel.Session {
	te.t.Helper()
	var out vercel.SessionResponse
	te.must(200, "GET", "/v2/sandboxes/sessions/"+id, nil, &out)
	return out.Session
}

func (te *tenv) stop(id string) vercel.StopSessionResponse {
	te.t.Helper()
	var out vercel.StopSessionResponse
	te.must(200, "POST", "/v2/sandboxes/sessions/"+id+"/stop", nil, &out)
	return out
}

// tarGz builds a gzip'd tar of files (name → content).
func tarGz(t *testing.T, files map[string]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for name, content := range files {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(content)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(content)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func (te *tenv) writeFiles(sessionID string, files map[string]string) resp {
	te.t.Helper()
	r, err := http.NewRequest("POST", te.srv.URL+"/v2/sandboxes/sessions/"+sessionID+"/fs/write", bytes.NewReader(tarGz(te.t, files)))
	if err != nil {
		te.t.Fatal(err)
	}
	r.Header.Set("Authorization", "Bearer "+te.tok)
	r.Header.Set("Content-Type", "application/gzip")
	r.Header.Set("x-cwd", "/")
	res, err := te.hc.Do(r)
	if err != nil {
		te.t.Fatal(err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	return resp{status: res.StatusCode, header: res.Header, body: raw}
}

func (te *tenv) readFile(sessionID, path string) resp {
	te.t.Helper()
	return te.req("POST", "/v2/sandboxes/sessions/"+sessionID+"/fs/read", map[string]any{"path": path})
}

// jwt builds an OIDC token signed with testRSAKey (verifiable with testJWKS).
func jwt(claims map[string]any) string {
	return signJWT(&testRSAKey.PublicKey, testRSAKey, "rsa-1", claims)
}

// requireKeys checks that a JSON object has every key.
func requireKeys(t *testing.T, what string, obj map[string]any, keys ...string) {
	t.Helper()
	for _, k := range keys {
		if _, ok := obj[k]; !ok {
			t.Errorf("%s: missing required key %q in %v", what, k, obj)
		}
	}
}

// newTarballServer serves data at every path and returns its base URL.
func newTarballServer(t *testing.T, data []byte) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/gzip")
		_, _ = w.Write(data)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

func writeFile(p, s string) error { return os.WriteFile(p, []byte(s), 0o644) }

func TestNewRefusesBadOptions(t *testing.T) {
	for _, tc := range []struct {
		opts Options
		want string
	}{
		{Options{DuplicateNameStatus: 401}, "emulator: DuplicateNameStatus must be 400 or 409, not 401"},
		{Options{SecondStopStatus: 404}, "emulator: SecondStopStatus must be 200 or 410, not 404"},
		{Options{DeletedSnapshotGetStatus: 410}, "emulator: DeletedSnapshotGetStatus must be 200 or 404, not 410"},
		{Options{PendingOps: "later"}, `emulator: PendingOps must be "queue" or "reject", not "later"`},
		{Options{StartPending: -time.Second}, "emulator: StartPending must not be negative"},
		{Options{Exec: "vm"}, `emulator: Exec must be "", "namespace", "host" or "none", not "vm"`},
	} {
		if tc.opts.Exec == "" {
			tc.opts.Exec = "none"
		}
		e, err := New(tc.opts)
		if err == nil {
			_ = e.Close()
			t.Errorf("New(%+v) succeeded, want %q", tc.opts, tc.want)
			continue
		}
		if err.Error() != tc.want {
			t.Errorf("New(%+v) = %q, want %q", tc.opts, err, tc.want)
		}
	}
	// Unset options take their defaults.
	e, err := New(Options{Exec: "none"})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if o := e.opts; o.DuplicateNameStatus != 400 || o.SecondStopStatus != 200 || o.DeletedSnapshotGetStatus != 200 || o.PendingOps != "queue" {
		t.Errorf("defaults: %+v", o)
	}
}
