package vercel

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sync"
	"time"

	"golang.org/x/net/websocket"
)

// EPOpenInteractive is POST /v2/sandboxes/sessions/{id}/interactive.
const EPOpenInteractive = "openInteractive"

// InteractiveSession is where to connect to a session's terminal: a WebSocket
// URL and the token that authorises one connection
// (docs/dev/interactive-sessions.md).
type InteractiveSession struct {
	URL   string `json:"url"`
	Token string `json:"token"`
}

// OpenInteractive asks for an interactive session on a running session, as
// the official SDK's openInteractive does.
func (c *Client) OpenInteractive(ctx context.Context, sessionID string) (*InteractiveSession, error) {
	if err := checkID(EPOpenInteractive, "session id", sessionID); err != nil {
		return nil, err
	}
	r, err := c.jsonRequest(EPOpenInteractive, http.MethodPost, sessionPath(sessionID)+"/interactive", nil, struct{}{}, sendOnce)
	if err != nil {
		return nil, err
	}
	var out InteractiveSession
	if err := c.do(ctx, r, &out); err != nil {
		return nil, err
	}
	if out.URL == "" || out.Token == "" {
		return nil, fmt.Errorf("vercel %s: the answer has no url or token", EPOpenInteractive)
	}
	return &out, nil
}

// TerminalStart is the first message of an interactive session: the command
// to run on the session's terminal and the terminal's size.
type TerminalStart struct {
	Command string
	Args    []string
	Env     map[string]string
	Cwd     string // "" = the session's cwd
	Cols    uint16
	Rows    uint16
}

// Terminal is a connected interactive session: write input to it, resize
// it, and Wait for its output and exit code. Safe for concurrent use.
type Terminal struct {
	ws *websocket.Conn
	mu sync.Mutex // one writer at a time
}

// DialTerminal connects to s and starts cmd there, speaking the protocol of
// Vercel's CLI: a health check of the URL's host (https for wss URLs, as
// the CLI does; http for ws, which only the emulator hands out), the
// WebSocket with the token in the query, then the start message.
func DialTerminal(ctx context.Context, s *InteractiveSession, cmd TerminalStart) (*Terminal, error) {
	u, err := url.Parse(s.URL)
	if err != nil {
		return nil, fmt.Errorf("interactive session url: %w", err)
	}
	health := &url.URL{Scheme: "https", Host: u.Hostname(), Path: "/health"}
	if u.Scheme == "ws" {
		health = &url.URL{Scheme: "http", Host: u.Host, Path: "/health"}
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodGet, health.String(), nil)
	if err != nil {
		return nil, err
	}
	hc := &http.Client{Timeout: 10 * time.Second}
	resp, err := hc.Do(hreq)
	if err != nil {
		return nil, fmt.Errorf("interactive session health check: %w", err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return nil, fmt.Errorf("interactive session health check: %s", resp.Status)
	}

	q := u.Query()
	q.Set("token", s.Token)
	u.RawQuery = q.Encode()
	origin := "https://" + u.Host
	if u.Scheme == "ws" {
		origin = "http://" + u.Host
	}
	cfg, err := websocket.NewConfig(u.String(), origin)
	if err != nil {
		return nil, err
	}
	ws, err := cfg.DialContext(ctx)
	if err != nil {
		// A DialError names the URL, token included: keep only its cause.
		var de *websocket.DialError
		if errors.As(err, &de) {
			err = de.Err
		}
		return nil, fmt.Errorf("connect to the interactive session at %s: %w", s.URL, err)
	}
	env := make([]string, 0, len(cmd.Env))
	for k, v := range cmd.Env {
		env = append(env, k+"="+v)
	}
	start := map[string]any{"type": "start", "command": cmd.Command, "args": cmd.Args, "env": env, "cols": cmd.Cols, "rows": cmd.Rows}
	if cmd.Args == nil {
		start["args"] = []string{}
	}
	if cmd.Cwd != "" {
		start["cwd"] = cmd.Cwd
	}
	t := &Terminal{ws: ws}
	if err := t.sendJSON(start); err != nil {
		ws.Close()
		return nil, fmt.Errorf("start the interactive command: %w", err)
	}
	return t, nil
}

func (t *Terminal) sendJSON(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return websocket.Message.Send(t.ws, string(b)) // a string is a text frame
}

// Write sends input (keystrokes) to the terminal.
func (t *Terminal) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := websocket.Message.Send(t.ws, p); err != nil { // []byte is a binary frame
		return 0, err
	}
	return len(p), nil
}

// Resize tells the terminal its new size.
func (t *Terminal) Resize(cols, rows uint16) error {
	return t.sendJSON(map[string]any{"type": "resize", "cols": cols, "rows": rows})
}

// Close closes the connection; the server hangs up the command.
func (t *Terminal) Close() error { return t.ws.Close() }

// ErrNoExitCode is returned by Wait when the connection ended without an exit
// message.
var ErrNoExitCode = errors.New("the interactive session ended without an exit code")

// Wait copies the terminal's output to out until the server closes the
// connection, and returns the command's exit code.
func (t *Terminal) Wait(out io.Writer) (int, error) {
	code := -1
	for {
		var data []byte
		var text bool
		err := websocket.Codec{Unmarshal: func(b []byte, payloadType byte, _ any) error {
			data, text = b, payloadType == websocket.TextFrame
			return nil
		}}.Receive(t.ws, nil)
		if err != nil {
			if code >= 0 {
				return code, nil
			}
			if errors.Is(err, io.EOF) {
				return -1, ErrNoExitCode
			}
			return -1, err
		}
		if text {
			var m struct {
				Type string `json:"type"`
				Code *int   `json:"code"`
			}
			if json.Unmarshal(data, &m) == nil && m.Type == "exit" {
				if m.Code != nil {
					code = *m.Code
				}
				continue
			}
		}
		if _, err := out.Write(data); err != nil {
			return -1, err
		}
	}
}
