package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestRunServesAndStops(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var out, errOut syncBuf
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"--exec=none", "--token=tok", "--plan=hobby", "--max-running=3", "--fake-clock"}, &out, &errOut, ready)
	}()
	var url string
	select {
	case url = <-ready:
	case err := <-done:
		t.Fatalf("run: %v (%s)", err, errOut.String())
	case <-time.After(10 * time.Second):
		t.Fatal("not ready")
	}
	if !strings.Contains(out.String(), "VERCEL_API_URL="+url+" VERCEL_TOKEN=tok") || !strings.Contains(out.String(), "exec mode: none") {
		t.Fatalf("banner: %s", out.String())
	}
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr}
	req, _ := http.NewRequest("POST", url+"/v3/sandboxes", strings.NewReader(`{"projectId":"prj_emulator"}`))
	req.Header.Set("Authorization", "Bearer tok")
	res, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 {
		t.Fatalf("create: %d %s", res.StatusCode, body)
	}
	req, _ = http.NewRequest("POST", url+"/_emulator/clock/advance", strings.NewReader(`{"ms":1000}`))
	req.Header.Set("Authorization", "Bearer tok")
	if res, err = hc.Do(req); err != nil || res.StatusCode != 200 {
		t.Fatalf("advance: %v %v", err, res)
	}
	res.Body.Close()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run returned %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("did not stop on cancel")
	}
}

func TestRunPrintEnv(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var out, errOut syncBuf
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() { done <- run(ctx, []string{"--exec=host", "--print-env"}, &out, &errOut, ready) }()
	url := <-ready
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out.String(), "export VERCEL_API_URL="+url+"\nexport VERCEL_TOKEN=") {
		t.Fatalf("stdout: %q", out.String())
	}
	if !strings.Contains(errOut.String(), "NOT an isolation boundary") {
		t.Fatalf("no warning on stderr: %s", errOut.String())
	}
}

func TestCheckListen(t *testing.T) {
	for _, tc := range []struct {
		addr   string
		remote bool
		ok     bool
	}{
		{"127.0.0.1:0", false, true},
		{"localhost:8080", false, true},
		{"[::1]:0", false, true},
		{"0.0.0.0:8080", false, false},
		{":8080", false, false},
		{"10.1.2.3:80", false, false},
		{"0.0.0.0:8080", true, true},
		{"nonsense", false, false},
	} {
		if err := checkListen(tc.addr, tc.remote); (err == nil) != tc.ok {
			t.Errorf("checkListen(%q, %v) = %v", tc.addr, tc.remote, err)
		}
	}
	err := run(context.Background(), []string{"--listen=0.0.0.0:0"}, io.Discard, io.Discard, nil)
	if err == nil || !strings.Contains(err.Error(), "--allow-remote") {
		t.Fatalf("run with remote listen: %v", err)
	}
	if err := run(context.Background(), []string{"--plan=team"}, io.Discard, io.Discard, nil); err == nil {
		t.Fatal("bad plan accepted")
	}
}

func TestRunSecurityFlags(t *testing.T) {
	dir := t.TempDir()
	bad := dir + "/bad.json"
	if err := os.WriteFile(bad, []byte(`{"keys":[]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--exec=none", "--oidc-jwks-file=" + dir + "/missing.json"}, "--oidc-jwks-file"},
		{[]string{"--exec=none", "--oidc-jwks-file=" + bad}, "no keys"},
		{[]string{"--exec=none", "--oidc-issuer=https://oidc.vercel.com/x"}, "needs --oidc-jwks-file"},
		{[]string{"--exec=none", "--allowed-source-dir=" + dir + "/missing"}, "AllowedSourceDir"},
	} {
		err := run(context.Background(), tc.args, io.Discard, io.Discard, nil)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("run %q = %v, want an error with %q", tc.args, err, tc.want)
		}
	}

	// The banner names the allowed source directory.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ready := make(chan string, 1)
	var out, errOut syncBuf
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"--exec=none", "--allowed-source-dir=" + dir, "--source-max-entries=10", "--max-read-bytes=1024"}, &out, &errOut, ready)
	}()
	select {
	case <-ready:
	case err := <-done:
		t.Fatal(err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "host paths inside "+dir) {
		t.Fatalf("banner: %s", out.String())
	}
}

// --credentials-file adds a tenant token that acts on its own team only; the
// banner names the tenant's team but not its token; a malformed file is
// refused without quoting it.
func TestRunCredentialsFile(t *testing.T) {
	dir := t.TempDir()
	file := dir + "/creds.json"
	if err := os.WriteFile(file, []byte(`[{"token":"tenant-secret","teams":["team_a"],"projects":["prj_a"]}]`), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var out, errOut syncBuf
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() { done <- run(ctx, []string{"--exec=none", "--credentials-file=" + file}, &out, &errOut, ready) }()
	var url string
	select {
	case url = <-ready:
	case err := <-done:
		t.Fatalf("run: %v (%s)", err, errOut.String())
	case <-time.After(10 * time.Second):
		t.Fatal("not ready")
	}
	if !strings.Contains(out.String(), "teams team_a") || strings.Contains(out.String(), "tenant-secret") {
		t.Fatalf("banner: %s", out.String())
	}
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr}
	status := func(team string) int {
		req, _ := http.NewRequest("POST", url+"/v3/sandboxes?teamId="+team, strings.NewReader(`{"projectId":"prj_a"}`))
		req.Header.Set("Authorization", "Bearer tenant-secret")
		res, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return res.StatusCode
	}
	if s := status("team_a"); s != 200 {
		t.Fatalf("create in the tenant's team: %d", s)
	}
	if s := status("team_emulator"); s != 403 {
		t.Fatalf("create in another team: %d, want 403", s)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	if err := os.WriteFile(file, []byte(`{"token":"tenant-secret"`), 0o600); err != nil {
		t.Fatal(err)
	}
	err := run(context.Background(), []string{"--exec=none", "--credentials-file=" + file}, &out, &errOut, nil)
	if err == nil || strings.Contains(err.Error(), "tenant-secret") {
		t.Fatalf("malformed file: err = %v", err)
	}
}
