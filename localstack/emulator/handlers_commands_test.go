package emulator

import (
	"bufio"
	"encoding/json"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/getsentry/sandbox-controller/internal/vercel"
)

// record is one NDJSON line as a client decodes it.
type record struct {
	Command *vercel.Command `json:"command"`
	Stream  string          `json:"stream"`
	Data    json.RawMessage `json:"data"`
}

// stream sends a request and reads the NDJSON answer line by line.
func (te *tenv) stream(method, path string, body any) (*http.Response, []record) {
	te.t.Helper()
	r, err := http.NewRequest(method, te.srv.URL+path, strings.NewReader(mustJSON(body)))
	if body == nil {
		r, err = http.NewRequest(method, te.srv.URL+path, nil)
	}
	if err != nil {
		te.t.Fatal(err)
	}
	r.Header.Set("Authorization", "Bearer "+te.tok)
	res, err := te.hc.Do(r)
	if err != nil {
		te.t.Fatal(err)
	}
	defer res.Body.Close()
	var recs []record
	sc := bufio.NewScanner(res.Body)
	for sc.Scan() {
		var rec record
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			te.t.Fatalf("bad NDJSON line %q: %v", sc.Text(), err)
		}
		recs = append(recs, rec)
	}
	return res, recs
}

func TestCommandsExecNone(t *testing.T) {
	te := newEnv(t, Options{})
	te.e.ScriptExit("fail", 3)
	sb := te.create(nil)
	sess := "/v2/sandboxes/sessions/" + sb.Session.ID

	var first vercel.CommandResponse
	te.must(200, "POST", sess+"/cmd", map[string]any{"command": "fail", "args": []string{"a"}}, &first)
	c := first.Command
	if c.ExitCode != nil || c.Name != "fail" || c.Args[0] != "a" || c.Cwd != "/vercel/sandbox" || c.SessionID != sb.Session.ID || !strings.HasPrefix(c.ID, "cmd_") {
		t.Fatalf("detached: %+v", c)
	}
	var got vercel.CommandResponse
	te.must(200, "GET", sess+"/cmd/"+c.ID+"?wait=true", nil, &got)
	if got.Command.ExitCode == nil || *got.Command.ExitCode != 3 {
		t.Fatalf("get: %+v", got.Command)
	}

	// wait:true without logs: exactly two records, same id, exit code last.
	res, recs := te.stream("POST", sess+"/cmd", map[string]any{"command": "fail", "cwd": "sub", "wait": true})
	if ct := res.Header.Get("Content-Type"); ct != "application/x-ndjson" {
		t.Fatalf("content-type %q", ct)
	}
	if len(recs) != 2 || recs[0].Command == nil || recs[1].Command == nil || recs[0].Command.ExitCode != nil ||
		recs[1].Command.ExitCode == nil || *recs[1].Command.ExitCode != 3 || recs[0].Command.ID != recs[1].Command.ID {
		t.Fatalf("stream: %+v", recs)
	}
	if recs[0].Command.Cwd != "/vercel/sandbox/sub" {
		t.Fatalf("relative cwd: %q", recs[0].Command.Cwd)
	}
	// The Python SDK's query form works too.
	_, recs = te.stream("POST", sess+"/cmd?wait=true&logs=true", map[string]any{"command": "ok"})
	if len(recs) != 2 || *recs[1].Command.ExitCode != 0 {
		t.Fatalf("query wait: %+v", recs)
	}

	var list vercel.ListCommandsResponse
	te.must(200, "GET", sess+"/cmd", nil, &list)
	if len(list.Commands) != 3 || list.Commands[2].ID != c.ID {
		t.Fatalf("list newest first: %+v", list.Commands)
	}
	if r := te.req("GET", sess+"/cmd/cmd_nope", nil); r.status != 404 {
		t.Fatalf("unknown command: %d", r.status)
	}
	// Kill of a finished command answers it unchanged.
	te.must(200, "POST", sess+"/cmd/"+c.ID+"/kill", map[string]any{"signal": 15}, &got)
	if *got.Command.ExitCode != 3 {
		t.Fatalf("kill finished: %+v", got.Command)
	}
	// Logs of a command with no output: an empty NDJSON stream.
	res, recs = te.stream("GET", sess+"/cmd/"+c.ID+"/logs", nil)
	if res.StatusCode != 200 || len(recs) != 0 || res.Header.Get("Content-Type") != "application/x-ndjson" {
		t.Fatalf("logs: %d %+v", res.StatusCode, recs)
	}
	// stdin needs attachStdin.
	if r := te.req("POST", sess+"/cmd/"+c.ID+"/stdin", map[string]any{"data": "aGk="}); r.status != 400 {
		t.Fatalf("stdin without attachStdin: %d", r.status)
	}
	// No session directory was created for commands in exec mode none.
	if te.e.st.sessions[sb.Session.ID].fs != nil {
		t.Fatal("exec none created a session filesystem")
	}
}

func needSh(t *testing.T) {
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh")
	}
}

func TestCommandsHost(t *testing.T) {
	needSh(t)
	te := newEnv(t, Options{Exec: "host"})
	sb := te.create(map[string]any{"env": map[string]string{"A": "sandbox", "B": "sandbox"}})
	sess := "/v2/sandboxes/sessions/" + sb.Session.ID

	// wait + logs: command record, output records, final record.
	res, recs := te.stream("POST", sess+"/cmd", map[string]any{
		"command": "sh", "args": []string{"-c", `echo "$A-$B"; echo oops >&2; pwd; exit 7`},
		"env": map[string]string{"B": "cmd"}, "wait": true, "logs": true,
	})
	if res.Header.Get("Content-Type") != "application/x-ndjson" {
		t.Fatalf("content-type %q", res.Header.Get("Content-Type"))
	}
	if len(recs) < 3 || recs[0].Command == nil || recs[len(recs)-1].Command == nil {
		t.Fatalf("records: %+v", recs)
	}
	var stdout, stderr string
	for _, r := range recs[1 : len(recs)-1] {
		var s string
		if err := json.Unmarshal(r.Data, &s); err != nil {
			t.Fatalf("data %s", r.Data)
		}
		switch r.Stream {
		case "stdout":
			stdout += s
		case "stderr":
			stderr += s
		default:
			t.Fatalf("stream %q", r.Stream)
		}
	}
	if !strings.HasPrefix(stdout, "sandbox-cmd\n") || !strings.HasSuffix(strings.TrimSpace(stdout), "/vercel/sandbox") || stderr != "oops\n" {
		t.Fatalf("stdout %q stderr %q", stdout, stderr)
	}
	if last := recs[len(recs)-1].Command; *last.ExitCode != 7 {
		t.Fatalf("exit %d", *last.ExitCode)
	}

	// Detached long command: logs follow, kill ends it with 128+signal.
	var started vercel.CommandResponse
	te.must(200, "POST", sess+"/cmd", map[string]any{"command": "sh", "args": []string{"-c", "echo ready; exec sleep 30"}}, &started)
	id := started.Command.ID
	logsDone := make(chan []record, 1)
	go func() {
		_, recs := te.stream("GET", sess+"/cmd/"+id+"/logs", nil)
		logsDone <- recs
	}()
	waitDone := make(chan vercel.CommandResponse, 1)
	go func() {
		var got vercel.CommandResponse
		te.must(200, "GET", sess+"/cmd/"+id+"?wait=true", nil, &got)
		waitDone <- got
	}()
	time.Sleep(200 * time.Millisecond)
	select {
	case <-waitDone:
		t.Fatal("GET ?wait=true returned before the command exited")
	default:
	}
	var killed vercel.CommandResponse
	te.must(200, "POST", sess+"/cmd/"+id+"/kill", map[string]any{"signal": 15}, &killed)
	select {
	case got := <-waitDone:
		if got.Command.ExitCode == nil || *got.Command.ExitCode != 143 {
			t.Fatalf("after kill: %+v", got.Command)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("wait did not return after kill")
	}
	select {
	case recs := <-logsDone:
		if len(recs) != 1 || recs[0].Stream != "stdout" {
			t.Fatalf("logs: %+v", recs)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("logs stream did not end")
	}
	// Logs replay after exit.
	_, recs = te.stream("GET", sess+"/cmd/"+id+"/logs", nil)
	if len(recs) != 1 {
		t.Fatalf("replay: %+v", recs)
	}
}

func TestCommandsEndWhenSessionTimesOut(t *testing.T) {
	needSh(t)
	te := newEnv(t, Options{Exec: "host"})
	sb := te.create(map[string]any{"timeout": 60000})
	sess := "/v2/sandboxes/sessions/" + sb.Session.ID
	type result struct {
		recs []record
	}
	done := make(chan result, 1)
	go func() {
		_, recs := te.stream("POST", sess+"/cmd", map[string]any{"command": "sleep", "args": []string{"60"}, "wait": true, "logs": true})
		done <- result{recs}
	}()
	// Wait until the command is registered.
	deadline := time.Now().Add(5 * time.Second)
	for {
		var list vercel.ListCommandsResponse
		te.must(200, "GET", sess+"/cmd", nil, &list)
		if len(list.Commands) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("command never started")
		}
		time.Sleep(10 * time.Millisecond)
	}
	te.clk.Advance(61 * time.Second)
	select {
	case r := <-done:
		last := r.recs[len(r.recs)-1]
		if last.Command == nil || last.Command.ExitCode == nil || *last.Command.ExitCode != 137 {
			t.Fatalf("stream end: %+v", r.recs)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("stream did not end when the session timed out")
	}
	if s := te.session(sb.Session.ID); s.Status != vercel.SessionStopped {
		t.Fatalf("session %s", s.Status)
	}
}

func TestFiles(t *testing.T) {
	te := newEnv(t, Options{})
	sb := te.create(nil)
	id := sb.Session.ID
	sess := "/v2/sandboxes/sessions/" + id

	if r := te.readFile(id, "/vercel/sandbox/none.txt"); r.status != 404 {
		t.Fatalf("read before any write: %d", r.status)
	}
	if r := te.writeFiles(id, map[string]string{"vercel/sandbox/dir/a.txt": "hello", "tmp/b": "b"}); r.status != 200 || strings.TrimSpace(string(r.body)) != "{}" {
		t.Fatalf("write: %d %s", r.status, r.body)
	}
	r := te.readFile(id, "dir/a.txt") // relative to the session cwd
	if r.status != 200 || string(r.body) != "hello" || r.header.Get("Content-Type") != "application/octet-stream" {
		t.Fatalf("read: %d %q %q", r.status, r.body, r.header.Get("Content-Type"))
	}
	if r := te.req("POST", sess+"/fs/read", map[string]any{"path": "b", "cwd": "/tmp"}); r.status != 200 || string(r.body) != "b" {
		t.Fatalf("read with cwd: %d %s", r.status, r.body)
	}
	if r := te.readFile(id, "/vercel/sandbox/missing"); r.status != 404 {
		t.Fatalf("missing: %d", r.status)
	}
	if r := te.readFile(id, "/vercel/sandbox/dir"); r.status != 400 {
		t.Fatalf("read a directory: %d %s", r.status, r.body)
	}
	if r := te.writeFiles(id, map[string]string{"../../etc/x": "evil"}); r.status != 400 {
		t.Fatalf("escaping write: %d %s", r.status, r.body)
	}
	if r := te.req("POST", sess+"/fs/write", "not gzip"); r.status != 400 {
		t.Fatalf("garbage write: %d %s", r.status, r.body)
	}
	te.must(200, "POST", sess+"/fs/mkdir", map[string]any{"path": "/vercel/sandbox/x/y/z"}, nil)
	te.must(200, "POST", sess+"/fs/mkdir", map[string]any{"path": "/vercel/sandbox/x/y/z"}, nil)
	if r := te.req("POST", sess+"/fs/mkdir", map[string]any{"path": "/vercel/sandbox/p/q", "recursive": false}); r.status != 400 {
		t.Fatalf("non-recursive mkdir without parent: %d %s", r.status, r.body)
	}
	// x-cwd must be absolute.
	req, _ := http.NewRequest("POST", te.srv.URL+sess+"/fs/write", strings.NewReader(""))
	req.Header.Set("Authorization", "Bearer "+testToken)
	req.Header.Set("x-cwd", "relative")
	res, err := te.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 400 {
		t.Fatalf("relative x-cwd: %d", res.StatusCode)
	}
}

func TestCreateFromTarballAndGit(t *testing.T) {
	needSh(t)
	tgz := tarGz(t, map[string]string{"README.md": "from tarball"})
	ts := newTarballServer(t, tgz)
	srcDir := t.TempDir()
	te := newEnv(t, Options{Exec: "host", AllowedSourceDir: srcDir})
	sb := te.create(map[string]any{"source": map[string]any{"type": "tarball", "url": ts + "/x.tar.gz"}})
	if r := te.readFile(sb.Session.ID, "/vercel/sandbox/README.md"); r.status != 200 || string(r.body) != "from tarball" {
		t.Fatalf("tarball: %d %s", r.status, r.body)
	}
	// Unreachable URLs are recorded, not fatal.
	te.create(map[string]any{"source": map[string]any{"type": "tarball", "url": "http://127.0.0.1:1/nope.tar.gz"}})

	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git")
	}
	repo := srcDir + "/repo"
	for _, args := range [][]string{
		{"init", "-q", "-b", "main", repo},
		{"-C", repo, "-c", "user.email=a@b", "-c", "user.name=a", "commit", "-q", "--allow-empty", "-m", "init"},
	} {
		if out, err := exec.Command("git", args...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v %s", args, err, out)
		}
	}
	if err := writeFile(repo+"/hello.txt", "from git"); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"-C", repo, "add", "hello.txt"},
		{"-C", repo, "-c", "user.email=a@b", "-c", "user.name=a", "commit", "-q", "-m", "hello"},
	} {
		if out, err := exec.Command("git", args...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v %s", args, err, out)
		}
	}
	sb = te.create(map[string]any{"source": map[string]any{"type": "git", "url": "file://" + repo, "depth": 1}})
	if r := te.readFile(sb.Session.ID, "/vercel/sandbox/hello.txt"); r.status != 200 || string(r.body) != "from git" {
		t.Fatalf("git: %d %s", r.status, r.body)
	}
	sb = te.create(map[string]any{"source": map[string]any{"type": "git", "url": repo, "revision": "HEAD~1"}})
	if r := te.readFile(sb.Session.ID, "/vercel/sandbox/hello.txt"); r.status != 404 {
		t.Fatalf("git revision: %d %s", r.status, r.body)
	}
}
