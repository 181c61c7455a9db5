package emulator

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/websocket"

	"github.com/getsentry/sandbox-controller/internal/vercel"
)

// wsClient speaks the interactive protocol the way Vercel's CLI does.
type wsClient struct {
	t    *testing.T
	ws   *websocket.Conn
	out  strings.Builder
	exit *int
}

func dialInteractive(t *testing.T, te *tenv, sessionID string) (*wsClient, string) {
	t.Helper()
	var grant struct{ URL, Token string }
	te.must(200, "POST", "/v2/sandboxes/sessions/"+sessionID+"/interactive", map[string]any{}, &grant)
	if !strings.HasPrefix(grant.URL, "ws://") || grant.Token == "" {
		t.Fatalf("interactive answer %+v: want a ws:// URL and a token", grant)
	}
	ws, err := websocket.Dial(grant.URL+"?token="+grant.Token, "", "http://localhost/")
	if err != nil {
		t.Fatalf("dial %s: %v", grant.URL, err)
	}
	t.Cleanup(func() { ws.Close() })
	return &wsClient{t: t, ws: ws}, grant.URL + "?token=" + grant.Token
}

func (c *wsClient) sendJSON(v any) {
	c.t.Helper()
	if err := websocket.JSON.Send(c.ws, v); err != nil {
		c.t.Fatal(err)
	}
}

// readUntil reads frames until the output contains want (or, with want
// "", until the server closes), recording the exit message.
func (c *wsClient) readUntil(want string) {
	c.t.Helper()
	_ = c.ws.SetReadDeadline(time.Now().Add(20 * time.Second))
	for want == "" || !strings.Contains(c.out.String(), want) {
		var f frame
		if err := frameCodec.Receive(c.ws, &f); err != nil {
			if want == "" {
				return
			}
			c.t.Fatalf("waiting for %q: %v; output so far %q", want, err, c.out.String())
		}
		if f.binary {
			c.out.Write(f.data)
			continue
		}
		var m interactiveMsg
		if err := json.Unmarshal(f.data, &m); err != nil || m.Type != "exit" || m.Code == nil {
			c.t.Fatalf("text frame %q: want an exit message", f.data)
		}
		c.exit = m.Code
	}
}

// TestInteractiveSession: a sandbox created with __interactive reports its
// interactive port; its session runs a shell on a terminal over the
// WebSocket: start, input, resize, output and the exit code; sudo is root;
// the token works once.
func TestInteractiveSession(t *testing.T) {
	needSh(t)
	te := newEnv(t, Options{Exec: "host", Clock: realClock{}, AllowHostRootSudo: true})
	sb := te.create(map[string]any{"__interactive": true})
	if sb.Session.InteractivePort == 0 {
		t.Fatalf("session of an interactive sandbox: interactivePort missing: %+v", sb.Session)
	}
	if plain := te.create(nil); plain.Session.InteractivePort != 0 {
		t.Errorf("a sandbox created without __interactive reports interactivePort %d", plain.Session.InteractivePort)
	}
	var fork vercel.SandboxResponse
	te.must(200, "POST", "/v2/sandboxes/"+sb.Sandbox.Name+"/fork"+prj, map[string]any{"__interactive": true}, &fork)
	if fork.Session.InteractivePort == 0 {
		t.Errorf("fork with __interactive: interactivePort missing")
	}

	c, url := dialInteractive(t, te, sb.Session.ID)
	c.sendJSON(map[string]any{
		"type": "start", "command": "sh",
		"args": []string{"-c", `stty size; read line; stty size; echo "got $line $GREETING"; exit 5`},
		"env":  []string{"TERM=xterm-256color", "GREETING=hi"}, "cols": 100, "rows": 30,
	})
	c.readUntil("30 100")
	c.sendJSON(map[string]any{"type": "resize", "cols": 132, "rows": 43})
	if err := frameCodec.Send(c.ws, frame{binary: true, data: []byte("typed\r")}); err != nil {
		t.Fatal(err)
	}
	c.readUntil("got typed hi")
	if !strings.Contains(c.out.String(), "43 132") {
		t.Errorf("the resize did not reach the terminal: %q", c.out.String())
	}
	c.readUntil("")
	if c.exit == nil || *c.exit != 5 {
		t.Fatalf("exit message %v, want code 5", c.exit)
	}
	// The shell is not one of the session's commands.
	var list vercel.ListCommandsResponse
	te.must(200, "GET", "/v2/sandboxes/sessions/"+sb.Session.ID+"/cmd", nil, &list)
	if len(list.Commands) != 0 {
		t.Errorf("command list shows the interactive shell: %+v", list.Commands)
	}
	// A token is used up by its connection.
	if _, err := websocket.Dial(url, "", "http://localhost/"); err == nil {
		t.Errorf("a used token connected again")
	}
	r, err := http.Get(strings.Replace(strings.SplitN(url, "?", 2)[0], "ws://", "http://", 1) + "?token=wrong")
	if err != nil {
		t.Fatal(err)
	}
	r.Body.Close()
	if r.StatusCode != 401 {
		t.Errorf("wrong token: status %d, want 401", r.StatusCode)
	}

	// The CLI's --sudo sends `sudo CMD`: root.
	c, _ = dialInteractive(t, te, sb.Session.ID)
	c.sendJSON(map[string]any{"type": "start", "command": "sudo", "args": []string{"id", "-u"}, "cols": 80, "rows": 24})
	c.readUntil("")
	if c.exit == nil || *c.exit != 0 || !strings.Contains(c.out.String(), "0") {
		t.Fatalf("sudo id -u: output %q, exit %v", c.out.String(), c.exit)
	}

	// A program that does not exist: its message, exit 127.
	c, _ = dialInteractive(t, te, sb.Session.ID)
	c.sendJSON(map[string]any{"type": "start", "command": "no-such-program-xyz"})
	c.readUntil("")
	if c.exit == nil || *c.exit != 127 || !strings.Contains(c.out.String(), "not found") {
		t.Fatalf("missing program: output %q, exit %v", c.out.String(), c.exit)
	}

	// Stopping the session ends a running shell.
	c, _ = dialInteractive(t, te, sb.Session.ID)
	c.sendJSON(map[string]any{"type": "start", "command": "sleep", "args": []string{"300"}})
	time.Sleep(200 * time.Millisecond)
	te.must(200, "POST", "/v2/sandboxes/sessions/"+sb.Session.ID+"/stop", map[string]any{}, nil)
	c.readUntil("")
	if c.exit == nil || *c.exit != 137 {
		t.Fatalf("shell of a stopped session: exit %v, want 137", c.exit)
	}
}

// TestInteractiveOnlyWhenCreatedSo: POST …/interactive on the session of a
// sandbox created without __interactive is refused, unless the emulator is
// told that Vercel serves any session (Options.InteractiveAnySession).
func TestInteractiveOnlyWhenCreatedSo(t *testing.T) {
	te := newEnv(t, Options{})
	plain := te.create(nil)
	r := te.must(400, "POST", "/v2/sandboxes/sessions/"+plain.Session.ID+"/interactive", map[string]any{}, nil)
	if !strings.Contains(string(r.body), "__interactive") {
		t.Errorf("the refusal does not say why: %s", r.body)
	}
	inter := te.create(map[string]any{"__interactive": true})
	var grant map[string]string
	te.must(200, "POST", "/v2/sandboxes/sessions/"+inter.Session.ID+"/interactive", map[string]any{}, &grant)
	if !strings.HasPrefix(grant["url"], "ws://") || grant["token"] == "" {
		t.Errorf("interactive sandbox: %v", grant)
	}

	loose := newEnv(t, Options{InteractiveAnySession: true})
	plain = loose.create(nil)
	loose.must(200, "POST", "/v2/sandboxes/sessions/"+plain.Session.ID+"/interactive", map[string]any{}, &grant)
	if grant["token"] == "" {
		t.Errorf("InteractiveAnySession: %v", grant)
	}
}
