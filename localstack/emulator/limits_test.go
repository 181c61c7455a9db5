package emulator

import (
	"encoding/json"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/getsentry/sandbox-controller/internal/vercel"
	"github.com/getsentry/sandbox-controller/localstack/procfs"
)

// The per-session bounds of a shared machine (Options.SessionOutputBytes,
// MaxLiveCommands, MaxProcessesPerCommand): tenants' commands are real
// processes on the emulator's host, so one session must not be able to take
// the memory, the process table or the machine's patience of everyone else.

// runLogged runs `sh -c script` with wait and logs and returns its stdout,
// its stderr and its exit code.
func (te *tenv) runLogged(sessionID, script string) (stdout, stderr string, code int) {
	te.t.Helper()
	res, recs := te.stream("POST", "/v2/sandboxes/sessions/"+sessionID+"/cmd", map[string]any{
		"command": "sh", "args": []string{"-c", script}, "wait": true, "logs": true,
	})
	if res.StatusCode != 200 || len(recs) < 2 || recs[len(recs)-1].Command == nil || recs[len(recs)-1].Command.ExitCode == nil {
		te.t.Fatalf("run %q: %d %+v", script, res.StatusCode, recs)
	}
	var out, errOut strings.Builder
	for _, r := range recs[1 : len(recs)-1] {
		var s string
		if err := json.Unmarshal(r.Data, &s); err != nil {
			te.t.Fatalf("data %s", r.Data)
		}
		if r.Stream == "stdout" {
			out.WriteString(s)
		} else {
			errOut.WriteString(s)
		}
	}
	return out.String(), errOut.String(), *recs[len(recs)-1].Command.ExitCode
}

// TestSessionOutputBudget: the output all commands of a session keep is
// bounded; the command that reaches the budget ends its output with a notice
// saying so, and later commands keep nothing but that notice.
func TestSessionOutputBudget(t *testing.T) {
	needSh(t)
	const budget = 100_000
	te := newEnv(t, Options{Exec: "host", Clock: realClock{}, SessionOutputBytes: budget})
	sb := te.create(nil)
	const print60k = `i=0; while [ $i -lt 600 ]; do printf '%099d\n' $i; i=$((i+1)); done` // 60,000 bytes

	out, errOut, code := te.runLogged(sb.Session.ID, print60k)
	if len(out) != 60_000 || errOut != "" || code != 0 {
		t.Fatalf("first command: %d bytes of stdout, stderr %q, exit %d; want all 60000 bytes kept", len(out), errOut, code)
	}
	out, errOut, code = te.runLogged(sb.Session.ID, print60k)
	if len(out) >= budget-60_000+1 || !strings.Contains(errOut, "per-session output budget") || !strings.Contains(errOut, strconv.Itoa(budget)) || code != 0 {
		t.Fatalf("second command: %d bytes of stdout, stderr %q, exit %d; want at most %d bytes and a notice naming the budget",
			len(out), errOut, code, budget-60_000)
	}
	out, errOut, _ = te.runLogged(sb.Session.ID, "echo more")
	if out != "" || !strings.Contains(errOut, "per-session output budget") {
		t.Fatalf("after the budget: stdout %q stderr %q, want only the notice", out, errOut)
	}

	// Another session has its own budget.
	other := te.create(nil)
	if out, _, _ := te.runLogged(other.Session.ID, "echo fresh"); out != "fresh\n" {
		t.Fatalf("another session: %q", out)
	}
}

// TestLiveCommandCap: a session runs at most MaxLiveCommands commands at
// once; one more is refused with 429 too_many_commands in Vercel's error
// shape, and accepted again once one has exited.
func TestLiveCommandCap(t *testing.T) {
	needSh(t)
	te := newEnv(t, Options{Exec: "host", Clock: realClock{}, MaxLiveCommands: 3})
	sb := te.create(nil)
	sess := "/v2/sandboxes/sessions/" + sb.Session.ID
	var ids []string
	for range 3 {
		var c vercel.CommandResponse
		te.must(200, "POST", sess+"/cmd", map[string]any{"command": "sleep", "args": []string{"30"}}, &c)
		ids = append(ids, c.Command.ID)
	}
	r := te.req("POST", sess+"/cmd", map[string]any{"command": "sleep", "args": []string{"30"}})
	if r.status != 429 || r.errCode() != "too_many_commands" || !strings.Contains(r.errMessage(), "3 commands") {
		t.Fatalf("fourth live command: %d %s, want 429 too_many_commands naming the cap", r.status, r.body)
	}
	// A finished command does not count.
	var killed vercel.CommandResponse
	te.must(200, "POST", sess+"/cmd/"+ids[0]+"/kill", map[string]any{"signal": 9}, &killed)
	var got vercel.CommandResponse
	te.must(200, "GET", sess+"/cmd/"+ids[0]+"?wait=true", nil, &got)
	te.must(200, "POST", sess+"/cmd", map[string]any{"command": "true"}, nil)
	// Another session is not affected.
	other := te.create(nil)
	te.must(200, "POST", "/v2/sandboxes/sessions/"+other.Session.ID+"/cmd", map[string]any{"command": "true"}, nil)
	te.stop(sb.Session.ID)
}

// TestProcessLimitBoundsAForkBomb: a command that tries to start 300
// processes gets no more than MaxProcessesPerCommand; the fork beyond the
// limit fails, and nothing is left running once the command ended.
func TestProcessLimitBoundsAForkBomb(t *testing.T) {
	needSh(t)
	if os.Geteuid() != 0 {
		t.Skip("process limits need commands in user namespaces: exec mode namespace as root")
	}
	const limit = 40
	te := newEnv(t, Options{Exec: "namespace", Clock: realClock{}, MaxProcessesPerCommand: limit})
	if !strings.Contains(te.e.ExecDescription(), "user namespace") {
		t.Skipf("no user namespaces here: %s", te.e.ExecDescription())
	}
	if !strings.Contains(te.e.ExecDescription(), "at most 40 processes per command") {
		t.Fatalf("the banner does not name the process limit: %s", te.e.ExecDescription())
	}
	// A unique argument finds the test's processes on the host.
	const marker = "31.4159"
	leftovers := func() []procfs.Process {
		var out []procfs.Process
		for _, p := range procfs.List() {
			if p.Name == "sleep" && len(p.Args) > 1 && p.Args[1] == marker {
				out = append(out, p)
			}
		}
		return out
	}
	t.Cleanup(func() {
		for _, p := range leftovers() {
			_ = (&os.Process{Pid: p.PID}).Kill()
		}
	})
	sb := te.create(nil)
	for _, sudo := range []bool{false, true} {
		res, recs := te.stream("POST", "/v2/sandboxes/sessions/"+sb.Session.ID+"/cmd", map[string]any{
			"command": "sh", "sudo": sudo, "wait": true, "logs": true, "args": []string{"-c",
				// Background sleeps, numbered as they start.
				`i=0; while [ $i -lt 300 ]; do sleep ` + marker + ` & i=$((i+1)); echo $i; done`},
		})
		if res.StatusCode != 200 || len(recs) < 2 || recs[len(recs)-1].Command == nil {
			t.Fatalf("sudo=%v: %d %+v", sudo, res.StatusCode, recs)
		}
		started, stderr := 0, ""
		for _, r := range recs[1 : len(recs)-1] {
			var s string
			_ = json.Unmarshal(r.Data, &s)
			if r.Stream == "stderr" {
				stderr += s
				continue
			}
			for _, f := range strings.Fields(s) {
				if n, err := strconv.Atoi(f); err == nil {
					started = max(started, n)
				}
			}
		}
		code := recs[len(recs)-1].Command.ExitCode
		if code == nil {
			t.Fatalf("sudo=%v: the last record has no exit code: %+v", sudo, recs[len(recs)-1].Command)
		}
		if started >= limit || *code == 0 || !strings.Contains(strings.ToLower(stderr), "fork") {
			t.Fatalf("sudo=%v: started %d background processes (limit %d), exit %d, stderr %q; want the fork beyond the limit to fail",
				sudo, started, limit, *code, stderr)
		}
		t.Logf("sudo=%v: %d background processes started, exit %d, stderr %q", sudo, started, *code, stderr)
		// The command's process group is killed when it ends.
		deadline := time.Now().Add(10 * time.Second)
		for len(leftovers()) > 0 && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
		if l := leftovers(); len(l) > 0 {
			t.Fatalf("sudo=%v: %d processes left running after the command ended", sudo, len(l))
		}
	}
}
