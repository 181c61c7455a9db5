package emulator

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"maps"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/net/websocket"

	"github.com/getsentry/sandbox-controller/internal/vercel"
	"github.com/getsentry/sandbox-controller/localstack/emulator/sandboxruntime"
)

// Interactive sessions, as Vercel's `sandbox` CLI (4.5) and SDK
// (`openInteractive`, 3.5) use them; docs/dev/interactive-sessions.md says
// what is known and what is inferred:
//
//   - create and fork with the private parameter `"__interactive": true` make
//     the sandbox's sessions report `interactivePort`;
//   - POST /v2/sandboxes/sessions/{id}/interactive answers {url, token};
//   - the client checks GET https://<url's host>/health, then opens the
//     WebSocket <url>?token=<token>, sends one text frame
//     {"type":"start", command, args, env: ["K=V"], cwd, cols, rows}, then
//     binary frames of input and text frames {"type":"resize", cols, rows};
//   - the server sends the terminal's output as binary frames and, when the
//     command has exited, the text frame {"type":"exit","code":N}, then closes.
//
// The emulator serves the WebSocket at /_interactive/{sessionId} on its own
// address, over plain HTTP like the rest of the API.

const (
	// interactivePort is the port sessions of an interactive sandbox report.
	// Vercel's value is unknown; the CLI only needs one and hides the route of
	// that port from its listings.
	interactivePort = 49982
	// interactivePrefix is the path of the WebSocket endpoint, before the session id.
	interactivePrefix = "/_interactive/"
	// interactiveTokenTTL is how long a token from POST …/interactive may be used.
	interactiveTokenTTL = 5 * time.Minute
	// maxInteractiveFrame bounds one WebSocket frame from a client.
	maxInteractiveFrame = 1 << 20
)

// interactiveGrant is what one token from POST …/interactive allows: one
// connection to one session's terminal.
type interactiveGrant struct {
	session string
	expires time.Time
}

// interactiveGrants are the tokens handed out and not used yet.
type interactiveGrants struct {
	mu     sync.Mutex
	grants map[string]interactiveGrant
}

// issue returns a new token for session.
func (g *interactiveGrants) issue(session string) string {
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	token := hex.EncodeToString(b)
	g.mu.Lock()
	defer g.mu.Unlock()
	now := time.Now()
	for t, gr := range g.grants {
		if now.After(gr.expires) {
			delete(g.grants, t)
		}
	}
	if g.grants == nil {
		g.grants = map[string]interactiveGrant{}
	}
	g.grants[token] = interactiveGrant{session: session, expires: now.Add(interactiveTokenTTL)}
	return token
}

// redeem uses up token for session; false if it is unknown, expired, used or
// for another session.
func (g *interactiveGrants) redeem(token, session string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	gr, ok := g.grants[token]
	if !ok || gr.session != session || time.Now().After(gr.expires) {
		return false
	}
	delete(g.grants, token)
	return true
}

func (e *Emulator) handleInteractive(rc *reqCtx) {
	if err := rc.decode(&struct{}{}, true); err != nil {
		rc.fail(err)
		return
	}
	serve(e, rc, e.liveSessionLocked, func(s *sessionRec) (any, *apiError) {
		if !s.sb.interactive && !e.opts.InteractiveAnySession {
			return nil, badRequest("Sandbox %s was not created with `__interactive: true`: its sessions serve no interactive shell.", s.sb.name)
		}
		host := rc.r.Host
		if host == "" {
			host = "127.0.0.1"
		}
		return map[string]string{
			"url":   "ws://" + host + interactivePrefix + s.id,
			"token": e.interactive.issue(s.id),
		}, nil
	})
}

// serveInteractive serves the health check and the WebSocket of interactive
// sessions; false for any other path.
func (e *Emulator) serveInteractive(w http.ResponseWriter, r *http.Request) bool {
	path := r.URL.Path
	switch {
	case path == "/health" && r.Method == http.MethodGet:
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
		return true
	case strings.HasPrefix(path, interactivePrefix):
		sid := strings.TrimPrefix(path, interactivePrefix)
		if !e.interactive.redeem(r.URL.Query().Get("token"), sid) {
			writeError(w, &apiError{status: 401, code: "unauthorized", message: "Invalid or expired interactive session token."})
			return true
		}
		// The token is the credential; browsers' Origin checks do not apply.
		srv := websocket.Server{
			Handshake: func(*websocket.Config, *http.Request) error { return nil },
			Handler:   func(ws *websocket.Conn) { e.runInteractive(ws, sid) },
		}
		srv.ServeHTTP(w, r)
		return true
	}
	return false
}

// interactiveMsg is a text frame of the protocol, in either direction.
type interactiveMsg struct {
	Type    string   `json:"type"`
	Command string   `json:"command,omitempty"`
	Args    []string `json:"args,omitempty"`
	Env     []string `json:"env,omitempty"`
	Cwd     string   `json:"cwd,omitempty"`
	Cols    uint16   `json:"cols,omitempty"`
	Rows    uint16   `json:"rows,omitempty"`
	Code    *int     `json:"code,omitempty"`
}

// frame is one WebSocket message with its kind.
type frame struct {
	binary bool
	data   []byte
}

var frameCodec = websocket.Codec{
	Marshal: func(v any) ([]byte, byte, error) {
		f := v.(frame)
		if f.binary {
			return f.data, websocket.BinaryFrame, nil
		}
		return f.data, websocket.TextFrame, nil
	},
	Unmarshal: func(data []byte, payloadType byte, v any) error {
		f := v.(*frame)
		f.binary, f.data = payloadType == websocket.BinaryFrame, data
		return nil
	},
}

// runInteractive runs one interactive session on ws: it waits for the start
// message, runs the command on a terminal, and relays until it exits.
func (e *Emulator) runInteractive(ws *websocket.Conn, sid string) {
	defer ws.Close()
	ws.MaxPayloadBytes = maxInteractiveFrame
	// Closing the emulator ends the connection (the HTTP server does not
	// track hijacked ones).
	handlerDone := make(chan struct{})
	defer close(handlerDone)
	go func() {
		select {
		case <-e.closing:
			ws.Close()
		case <-handlerDone:
		}
	}()
	var out sync.Mutex // one writer at a time
	send := func(f frame) error {
		out.Lock()
		defer out.Unlock()
		return frameCodec.Send(ws, f)
	}
	fail := func(msg string) {
		_ = send(frame{binary: true, data: []byte("sandbox emulator: " + msg + "\r\n")})
		code := 1
		b, _ := json.Marshal(interactiveMsg{Type: "exit", Code: &code})
		_ = send(frame{data: b})
	}

	// The first message must be "start".
	_ = ws.SetReadDeadline(time.Now().Add(30 * time.Second))
	var f frame
	var start interactiveMsg
	if err := frameCodec.Receive(ws, &f); err != nil {
		return
	}
	_ = ws.SetReadDeadline(time.Time{})
	if f.binary || json.Unmarshal(f.data, &start) != nil || start.Type != "start" || start.Command == "" {
		fail(`the first message must be {"type":"start","command":...}`)
		return
	}
	p, term, err := e.startInteractive(sid, start)
	if err != nil {
		fail(err.Error())
		return
	}
	defer term.Close()

	// Output: the terminal until it reports its end (once the command and
	// everything it left holding the terminal are gone).
	outputDone := make(chan struct{})
	go func() {
		defer close(outputDone)
		buf := make([]byte, 32<<10)
		for {
			n, err := term.Read(buf)
			if n > 0 {
				if send(frame{binary: true, data: append([]byte(nil), buf[:n]...)}) != nil {
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()

	// Input: until the client goes away.
	clientGone := make(chan struct{})
	go func() {
		defer close(clientGone)
		for {
			var f frame
			if err := frameCodec.Receive(ws, &f); err != nil {
				return
			}
			if f.binary {
				_, _ = term.Write(f.data)
				continue
			}
			var m interactiveMsg
			if json.Unmarshal(f.data, &m) != nil {
				_, _ = term.Write(f.data) // plain text typed in
				continue
			}
			if m.Type == "resize" {
				_ = term.Resize(sandboxruntime.WindowSize{Cols: m.Cols, Rows: m.Rows})
			}
		}
	}()

	select {
	case <-p.Done():
	case <-clientGone:
		// A hung-up terminal: the shell gets SIGHUP, as over ssh.
		_ = p.Kill(int(syscall.SIGHUP))
		select {
		case <-p.Done():
		case <-time.After(2 * time.Second):
			p.Terminate()
		}
		return
	}
	// A daemon the command left behind may hold the terminal open: stop
	// waiting for the rest of the output shortly after the command exited.
	_ = term.File().SetReadDeadline(time.Now().Add(250 * time.Millisecond))
	<-outputDone
	// A program that could not be started left its message in the log.
	_ = p.Output().Follow(context.Background(), func(r sandboxruntime.Record) error {
		return send(frame{binary: true, data: []byte(strings.ReplaceAll(r.Data, "\n", "\r\n"))})
	})
	code, _ := p.ExitCode()
	b, _ := json.Marshal(interactiveMsg{Type: "exit", Code: &code})
	_ = send(frame{data: b})
}

// startInteractive starts the command of a start message on a terminal in
// the running session sid and records it with the session's commands (so a
// stop ends it), hidden from the command list. A leading "sudo" (the CLI's
// --sudo) runs the rest as root.
func (e *Emulator) startInteractive(sid string, m interactiveMsg) (*sandboxruntime.Process, *sandboxruntime.Terminal, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	s := e.st.sessions[sid]
	if s == nil || s.status != vercel.SessionRunning || s.inStop {
		return nil, nil, errors.New("the sandbox session is not running")
	}
	fsys := s.fs
	if fsys == nil && e.runner.Mode() != sandboxruntime.ModeNone {
		var err *apiError
		if fsys, err = e.fsLocked(s); err != nil {
			return nil, nil, errors.New(err.message)
		}
	}
	env := maps.Clone(s.env)
	if env == nil {
		env = map[string]string{}
	}
	for _, kv := range m.Env {
		if k, v, ok := strings.Cut(kv, "="); ok && k != "" {
			env[k] = v
		}
	}
	cwd := s.cwd
	if m.Cwd != "" {
		cwd = m.Cwd
	}
	if err := e.admitCommandLocked(s); err != nil {
		return nil, nil, errors.New(err.message)
	}
	spec := sandboxruntime.Command{FS: fsys, Name: m.Command, Args: m.Args, Cwd: cwd, Env: env, OutputBudget: s.output}
	if err := e.egressCommandLocked(s, &spec); err != nil {
		return nil, nil, errors.New(err.message)
	}
	if spec.Name == "sudo" && len(spec.Args) > 0 {
		spec.Sudo, spec.Name, spec.Args = true, spec.Args[0], spec.Args[1:]
	}
	p, term, err := e.runner.StartTerminal(spec, sandboxruntime.WindowSize{Cols: m.Cols, Rows: m.Rows})
	if err != nil {
		return nil, nil, err
	}
	c := &commandRec{
		id:          newCommandID(),
		name:        spec.Name,
		args:        spec.Args,
		cwd:         absSandboxPath(cwd),
		sess:        s,
		startedAt:   e.nowMs(),
		proc:        p,
		interactive: true,
	}
	s.commands = append(s.commands, c)
	e.wg.Add(1)
	go e.waitCommand(c, p)
	return p, term, nil
}
