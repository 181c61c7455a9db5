package vercel

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"unicode/utf8"
)

// ErrStreamClosed is returned by Next after Close.
var ErrStreamClosed = errors.New("vercel: stream closed")

const ndjsonMediaType = "application/x-ndjson"

func commandPath(sessionID, cmdID string) string {
	return sessionPath(sessionID) + "/cmd/" + url.PathEscape(cmdID)
}

// normalizeCommand sends args and env as [] and {} rather than null, as the SDK
// does (docs/dev/vercel-sandbox-api.md §5.8): the server's schema types them as
// array and object.
func normalizeCommand(req RunCommandRequest) RunCommandRequest {
	if req.Args == nil {
		req.Args = []string{}
	}
	if req.Env == nil {
		req.Env = map[string]string{}
	}
	return req
}

// RunCommand starts a detached command and returns it with ExitCode nil
// (docs/dev/vercel-sandbox-api.md §5.8). req.Wait and req.Logs are ignored. It
// is never re-sent: a repeat would run the command twice.
func (c *Client) RunCommand(ctx context.Context, sessionID string, req RunCommandRequest) (*Command, error) {
	if err := checkID(EPRunCommand, "session id", sessionID); err != nil {
		return nil, err
	}
	req = normalizeCommand(req)
	req.Wait, req.Logs = false, false
	r, err := c.jsonRequest(EPRunCommand, http.MethodPost, sessionPath(sessionID)+"/cmd", nil, req, sendOnce)
	if err != nil {
		return nil, err
	}
	var out CommandResponse
	if err := c.do(ctx, r, &out); err != nil {
		return nil, err
	}
	return &out.Command, nil
}

// RunCommandStream runs a command with wait=true and returns its NDJSON stream:
// a command record when it starts, its output when req.Logs is set, and a final
// command record with the exit code (docs/dev/vercel-sandbox-api.md §5.8). The
// stream lives as long as the command; ctx bounds it, and a read that waits
// StreamIdleTimeout without a byte ends it. The caller must Close it.
func (c *Client) RunCommandStream(ctx context.Context, sessionID string, req RunCommandRequest) (*CommandStream, error) {
	if err := checkID(EPRunCommand, "session id", sessionID); err != nil {
		return nil, err
	}
	req = normalizeCommand(req)
	req.Wait = true
	r, err := c.jsonRequest(EPRunCommand, http.MethodPost, sessionPath(sessionID)+"/cmd", nil, req, sendOnce)
	if err != nil {
		return nil, err
	}
	body, sctx, err := c.openStream(ctx, r)
	if err != nil {
		return nil, err
	}
	return &CommandStream{stream: newStream(sctx, c, r.endpoint, body)}, nil
}

// openStream sends r and checks that the answer is NDJSON. The body and the
// returned context are bounded as openBody says.
func (c *Client) openStream(ctx context.Context, r *request) (io.ReadCloser, context.Context, error) {
	resp, sctx, err := c.openBody(ctx, r)
	if err != nil {
		return nil, nil, err
	}
	if err := checkMediaType(r.endpoint, resp, ndjsonMediaType); err != nil {
		closeBody(resp.Body)
		return nil, nil, err
	}
	return resp.Body, sctx, nil
}

// stream is what CommandStream and LogStream share: an NDJSON body that
// reports read failures in the package's error types.
type stream struct {
	ctx      context.Context
	c        *Client
	endpoint string
	body     io.ReadCloser
	dec      *ndjsonDecoder
	closed   atomic.Bool
	once     sync.Once
}

func newStream(ctx context.Context, c *Client, endpoint string, body io.ReadCloser) *stream {
	return &stream{ctx: ctx, c: c, endpoint: endpoint, body: body, dec: newNDJSONDecoder(body, endpoint)}
}

// next returns the next record; io.EOF at the end of the body.
func (s *stream) next() (Record, error) {
	rec, err := s.dec.next()
	if err == nil || err == io.EOF {
		return rec, err
	}
	var se *StreamError
	var pe *ProtocolError
	switch {
	case errors.As(err, &se), errors.As(err, &pe):
		return rec, err
	case s.closed.Load():
		return rec, ErrStreamClosed
	case s.ctx.Err() != nil:
		return rec, s.c.ctxError(s.endpoint, context.Cause(s.ctx))
	}
	return rec, &TransientError{Endpoint: s.endpoint, Err: err}
}

// Close releases the connection. It is safe to call more than once and from
// another goroutine, to unblock a Next.
func (s *stream) close() error {
	s.once.Do(func() {
		s.closed.Store(true)
		s.body.Close()
	})
	return nil
}

// CommandStream is the answer of RunCommandStream. Use it from one goroutine
// (Close may be called from any).
type CommandStream struct {
	*stream
	cmd *Command // latest command record
	err error    // sticky: io.EOF after the final record, or the failure
}

// Next returns the next record. After the final command record (the one with
// an exit code) it returns io.EOF. A stream that ends before it returns a
// *StreamError with Code CodeStreamEndedEarly; an in-band error record
// returns a *StreamError with the server's code.
func (s *CommandStream) Next() (Record, error) {
	if s.err != nil {
		return Record{}, s.err
	}
	rec, err := s.next()
	if err == io.EOF {
		err = &StreamError{Code: CodeStreamEndedEarly, Message: "stream ended before the command exited"}
	}
	if err != nil {
		s.err = err
		s.close()
		return Record{}, err
	}
	if rec.Command != nil {
		// The final record must describe the command the stream started
		// with (the Python SDK checks this too).
		if s.cmd != nil && rec.Command.ID != s.cmd.ID {
			s.err = &ProtocolError{Endpoint: s.endpoint, Message: "command id changed from " + s.cmd.ID + " to " + rec.Command.ID}
			s.close()
			return Record{}, s.err
		}
		s.cmd = rec.Command
		if rec.Command.ExitCode != nil {
			s.err = io.EOF
			s.close()
		}
	}
	return rec, nil
}

// Command returns the latest command record seen so far (nil before the
// first), e.g. to learn the command id while it still runs.
func (s *CommandStream) Command() *Command { return s.cmd }

// Wait reads the rest of the stream, discarding output, and returns the
// finished command.
func (s *CommandStream) Wait() (*Command, error) {
	for {
		if _, err := s.Next(); err != nil {
			if err == io.EOF {
				return s.cmd, nil
			}
			return nil, err
		}
	}
}

// Close releases the connection; the command keeps running on the server.
func (s *CommandStream) Close() error { return s.close() }

// LogStream is the answer of CommandLogs: output records only.
type LogStream struct {
	*stream
	err error
}

// Next returns the next output record, io.EOF when the command has exited
// and all output was sent, or a *StreamError for an in-band error (e.g.
// sandbox_stream_closed when the session stopped).
func (s *LogStream) Next() (Record, error) {
	for s.err == nil {
		rec, err := s.next()
		if err != nil {
			s.err = err
			s.close()
			break
		}
		if rec.Command == nil {
			return rec, nil
		}
		// The logs endpoint sends no command records
		// (docs/dev/vercel-sandbox-api.md §5.8); skip any.
	}
	return Record{}, s.err
}

// Close releases the connection.
func (s *LogStream) Close() error { return s.close() }

// GetCommand reads a command. With wait it blocks until the command exits
// (docs/dev/vercel-sandbox-api.md §5.8), but no longer than CallTimeout: a
// longer command fails the call with a transient timeout (IsTimeout), and the
// caller asks again — or follows the command with CommandLogs.
func (c *Client) GetCommand(ctx context.Context, sessionID, cmdID string, wait bool) (*Command, error) {
	if err := checkID(EPGetCommand, "session id", sessionID); err != nil {
		return nil, err
	}
	if err := checkID(EPGetCommand, "command id", cmdID); err != nil {
		return nil, err
	}
	q := url.Values{}
	if wait {
		q.Set("wait", "true")
	}
	r, _ := c.jsonRequest(EPGetCommand, http.MethodGet, commandPath(sessionID, cmdID), q, nil, retryable)
	var out CommandResponse
	if err := c.do(ctx, r, &out); err != nil {
		return nil, err
	}
	return &out.Command, nil
}

// ListCommands lists a session's commands, newest first.
func (c *Client) ListCommands(ctx context.Context, sessionID string) ([]Command, error) {
	if err := checkID(EPListCommands, "session id", sessionID); err != nil {
		return nil, err
	}
	r, _ := c.jsonRequest(EPListCommands, http.MethodGet, sessionPath(sessionID)+"/cmd", nil, nil, retryable)
	var out ListCommandsResponse
	if err := c.do(ctx, r, &out); err != nil {
		return nil, err
	}
	return out.Commands, nil
}

// KillCommand sends a POSIX signal number (15 = SIGTERM, 9 = SIGKILL) to a
// running command. Retried: signalling twice is harmless.
func (c *Client) KillCommand(ctx context.Context, sessionID, cmdID string, signal int) (*Command, error) {
	if err := checkID(EPKillCommand, "session id", sessionID); err != nil {
		return nil, err
	}
	if err := checkID(EPKillCommand, "command id", cmdID); err != nil {
		return nil, err
	}
	r, err := c.jsonRequest(EPKillCommand, http.MethodPost, commandPath(sessionID, cmdID)+"/kill", nil,
		KillCommandRequest{Signal: signal}, retryable)
	if err != nil {
		return nil, err
	}
	var out CommandResponse
	if err := c.do(ctx, r, &out); err != nil {
		return nil, err
	}
	return &out.Command, nil
}

// CommandLogs replays a command's output from the start and follows it until
// the command exits (docs/dev/vercel-sandbox-api.md §5.8). The caller must
// Close the stream.
func (c *Client) CommandLogs(ctx context.Context, sessionID, cmdID string) (*LogStream, error) {
	if err := checkID(EPCommandLogs, "session id", sessionID); err != nil {
		return nil, err
	}
	if err := checkID(EPCommandLogs, "command id", cmdID); err != nil {
		return nil, err
	}
	r, _ := c.jsonRequest(EPCommandLogs, http.MethodGet, commandPath(sessionID, cmdID)+"/logs", nil, nil, retryable)
	body, sctx, err := c.openStream(ctx, r)
	if err != nil {
		return nil, err
	}
	return &LogStream{stream: newStream(sctx, c, r.endpoint, body)}, nil
}

// MaxCollectedOutput bounds what ReadAllLogs keeps of each stream: a chatty
// command must not exhaust the controller's memory. The tail is kept, since
// the end of the output is what explains a failure.
const MaxCollectedOutput = 4 << 20

// ReadAllLogs reads a command's whole output (following it until exit) and
// returns stdout and stderr, each cut to its last MaxCollectedOutput bytes.
func (c *Client) ReadAllLogs(ctx context.Context, sessionID, cmdID string) (stdout, stderr string, err error) {
	ls, err := c.CommandLogs(ctx, sessionID, cmdID)
	if err != nil {
		return "", "", err
	}
	defer ls.Close()
	var out, errOut tailBuffer
	for {
		rec, err := ls.Next()
		if err == io.EOF {
			return out.String(), errOut.String(), nil
		}
		if err != nil {
			return out.String(), errOut.String(), err
		}
		switch rec.Stream {
		case StreamStdout:
			out.WriteString(rec.Data)
		case StreamStderr:
			errOut.WriteString(rec.Data)
		}
	}
}

// tailBuffer keeps the last MaxCollectedOutput bytes written to it.
type tailBuffer struct{ b strings.Builder }

func (t *tailBuffer) WriteString(s string) {
	t.b.WriteString(s)
	if t.b.Len() > 2*MaxCollectedOutput {
		// Compact rarely so that appending stays amortised O(1).
		tail := t.b.String()[t.b.Len()-MaxCollectedOutput:]
		t.b.Reset()
		t.b.WriteString(tail)
	}
}

func (t *tailBuffer) String() string {
	s := t.b.String()
	if len(s) > MaxCollectedOutput {
		s = s[len(s)-MaxCollectedOutput:]
		// Do not start in the middle of a UTF-8 sequence.
		for i := 0; i < utf8.UTFMax && len(s) > 0 && !utf8.RuneStart(s[0]); i++ {
			s = s[1:]
		}
	}
	return s
}
