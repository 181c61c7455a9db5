package vercel

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// ndjsonServer answers every request with the given lines as NDJSON,
// flushing after each; a line "<wait>" blocks until release is closed.
func ndjsonServer(t *testing.T, ct string, lines []string, release chan struct{}) *fakeAPI {
	return newFakeAPI(t, func(w http.ResponseWriter, r *http.Request, n int, body []byte) {
		w.Header().Set("Content-Type", ct)
		w.WriteHeader(200)
		fl := w.(http.Flusher)
		for _, l := range lines {
			if l == "<wait>" {
				fl.Flush()
				select {
				case <-release:
				case <-r.Context().Done():
					return
				}
				continue
			}
			io.WriteString(w, l+"\n")
			fl.Flush()
		}
	})
}

const (
	cmdStart = `{"command":{"id":"cmd_1","name":"sh","args":["-c","x"],"cwd":"/vercel/sandbox","sessionId":"sbx_1","exitCode":null,"startedAt":1}}`
	cmdEnd   = `{"command":{"id":"cmd_1","name":"sh","args":["-c","x"],"cwd":"/vercel/sandbox","sessionId":"sbx_1","exitCode":3,"durationMs":12,"startedAt":1}}`
)

func TestRunCommandStream(t *testing.T) {
	f := ndjsonServer(t, "application/x-ndjson", []string{
		cmdStart,
		`{"stream":"stdout","data":"hello "}`,
		``,
		`{"stream":"stderr","data":"warn\n"}`,
		`{"stream":"telemetry","data":{"future":true}}`, // unknown kind: skipped
		`{"stream":"stdout","data":"world\n","extra":1}`,
		cmdEnd,
	}, nil)
	c, _ := newTestClient(t, f, nil)
	s, err := c.RunCommandStream(context.Background(), "sbx_1", RunCommandRequest{Command: "sh", Args: []string{"-c", "x"}, Logs: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	jsonEqual(t, f.requests()[0].Body, `{"command":"sh","args":["-c","x"],"env":{},"wait":true,"logs":true}`)

	var got []string
	for {
		rec, err := s.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case rec.Command != nil && rec.Command.ExitCode == nil:
			got = append(got, "start:"+rec.Command.ID)
		case rec.Command != nil:
			got = append(got, "exit:"+string(rune('0'+*rec.Command.ExitCode)))
		default:
			got = append(got, rec.Stream+":"+rec.Data)
		}
	}
	want := "start:cmd_1|stdout:hello |stderr:warn\n|stdout:world\n|exit:3"
	if strings.Join(got, "|") != want {
		t.Errorf("records = %q, want %q", strings.Join(got, "|"), want)
	}
	if _, err := s.Next(); err != io.EOF {
		t.Errorf("Next after the end = %v, want io.EOF again", err)
	}
	if s.Command() == nil || *s.Command().ExitCode != 3 || s.Command().DurationMs != 12 {
		t.Errorf("Command() = %+v", s.Command())
	}
}

func TestCommandStreamWait(t *testing.T) {
	f := ndjsonServer(t, "application/x-ndjson; charset=utf-8", []string{cmdStart, cmdEnd}, nil)
	c, _ := newTestClient(t, f, nil)
	s, err := c.RunCommandStream(context.Background(), "sbx_1", RunCommandRequest{Command: "sh"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	cmd, err := s.Wait()
	if err != nil || cmd.ExitCode == nil || *cmd.ExitCode != 3 {
		t.Fatalf("Wait = %+v, %v", cmd, err)
	}
}

func TestCommandStreamErrors(t *testing.T) {
	cases := []struct {
		name  string
		lines []string
		check func(t *testing.T, err error)
	}{
		{"ended early", []string{cmdStart, `{"stream":"stdout","data":"x"}`}, func(t *testing.T, err error) {
			var se *StreamError
			if !errors.As(err, &se) || se.Code != CodeStreamEndedEarly || !IsTransient(err) {
				t.Errorf("err = %v", err)
			}
		}},
		{"empty stream", nil, func(t *testing.T, err error) {
			var se *StreamError
			if !errors.As(err, &se) || se.Code != CodeStreamEndedEarly {
				t.Errorf("err = %v", err)
			}
		}},
		{"in-band error", []string{cmdStart, `{"stream":"error","data":{"code":"sandbox_stream_closed","message":"Sandbox stream was closed and is not accepting commands."}}`, cmdEnd},
			func(t *testing.T, err error) {
				var se *StreamError
				if !errors.As(err, &se) || se.Code != CodeSandboxStreamClosed || !strings.Contains(se.Message, "not accepting") || Reason(err) != ReasonGone {
					t.Errorf("err = %v", err)
				}
			}},
		{"in-band stopped", []string{cmdStart, `{"stream":"error","data":{"code":"sandbox_stopped","message":"gone"}}`},
			func(t *testing.T, err error) {
				if !IsSessionStopped(err) {
					t.Errorf("err = %v", err)
				}
			}},
		{"malformed line", []string{cmdStart, `{"stream":`}, func(t *testing.T, err error) {
			var pe *ProtocolError
			if !errors.As(err, &pe) || pe.Endpoint != EPRunCommand {
				t.Errorf("err = %v", err)
			}
		}},
		{"id changes", []string{cmdStart, strings.Replace(cmdEnd, "cmd_1", "cmd_2", 1)}, func(t *testing.T, err error) {
			var pe *ProtocolError
			if !errors.As(err, &pe) {
				t.Errorf("err = %v", err)
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := ndjsonServer(t, "application/x-ndjson", tc.lines, nil)
			c, _ := newTestClient(t, f, nil)
			s, err := c.RunCommandStream(context.Background(), "sbx_1", RunCommandRequest{Command: "sh", Logs: true})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			_, err = s.Wait()
			tc.check(t, err)
			if _, again := s.Next(); again != err {
				t.Errorf("error not sticky: %v then %v", err, again)
			}
		})
	}
}

func TestStreamWrongContentType(t *testing.T) {
	f := ndjsonServer(t, "application/json", []string{`{"command":{"id":"cmd_1"}}`}, nil)
	c, _ := newTestClient(t, f, nil)
	_, err := c.RunCommandStream(context.Background(), "sbx_1", RunCommandRequest{Command: "sh"})
	var pe *ProtocolError
	if !errors.As(err, &pe) || !strings.Contains(err.Error(), "application/json") {
		t.Fatalf("err = %v", err)
	}
	if _, err := c.CommandLogs(context.Background(), "sbx_1", "cmd_1"); !errors.As(err, &pe) {
		t.Fatalf("logs err = %v", err)
	}
}

// Records are delivered as they arrive, not when the stream ends.
func TestStreamDeliversRecordsBeforeTheEnd(t *testing.T) {
	release := make(chan struct{})
	f := ndjsonServer(t, "application/x-ndjson", []string{cmdStart, `{"stream":"stdout","data":"early"}`, "<wait>", cmdEnd}, release)
	c, _ := newTestClient(t, f, nil)
	s, err := c.RunCommandStream(context.Background(), "sbx_1", RunCommandRequest{Command: "sh", Logs: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	done := make(chan Record, 2)
	go func() {
		for range 2 {
			r, err := s.Next()
			if err != nil {
				return
			}
			done <- r
		}
	}()
	for range 2 {
		select {
		case r := <-done:
			_ = r
		case <-time.After(5 * time.Second):
			t.Fatal("records held back until the stream ends")
		}
	}
	close(release)
	if cmd, err := s.Wait(); err != nil || *cmd.ExitCode != 3 {
		t.Fatalf("Wait = %v, %v", cmd, err)
	}
}

// Close from another goroutine unblocks a Next waiting for data.
func TestStreamCloseUnblocksNext(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	f := ndjsonServer(t, "application/x-ndjson", []string{cmdStart, "<wait>"}, release)
	c, _ := newTestClient(t, f, nil)
	s, err := c.RunCommandStream(context.Background(), "sbx_1", RunCommandRequest{Command: "sh"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Next(); err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() { _, err := s.Next(); errc <- err }()
	time.Sleep(50 * time.Millisecond)
	s.Close()
	select {
	case err := <-errc:
		if !errors.Is(err, ErrStreamClosed) {
			t.Errorf("err = %v, want ErrStreamClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not unblock Next")
	}
}

func TestStreamContextCancel(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	f := ndjsonServer(t, "application/x-ndjson", []string{cmdStart, "<wait>"}, release)
	c, _ := newTestClient(t, f, nil)
	ctx, cancel := context.WithCancel(context.Background())
	s, err := c.RunCommandStream(ctx, "sbx_1", RunCommandRequest{Command: "sh"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	time.AfterFunc(50*time.Millisecond, cancel)
	if _, err := s.Wait(); !errors.Is(err, context.Canceled) {
		t.Errorf("err = %v, want context.Canceled", err)
	}
}

func TestCommandLogsAndReadAllLogs(t *testing.T) {
	f := ndjsonServer(t, "application/x-ndjson", []string{
		`{"stream":"stdout","data":"line 1\n"}`,
		`{"stream":"stderr","data":"oops\n"}`,
		`{"stream":"stdout","data":"line 2\n"}`,
	}, nil)
	c, _ := newTestClient(t, f, nil)
	stdout, stderr, err := c.ReadAllLogs(context.Background(), "sbx_1", "cmd_1")
	if err != nil {
		t.Fatal(err)
	}
	if stdout != "line 1\nline 2\n" || stderr != "oops\n" {
		t.Errorf("stdout %q stderr %q", stdout, stderr)
	}
	if p := f.requests()[0].Path; p != "/v2/sandboxes/sessions/sbx_1/cmd/cmd_1/logs" {
		t.Errorf("path %s", p)
	}
}

func TestCommandLogsInBandError(t *testing.T) {
	f := ndjsonServer(t, "application/x-ndjson", []string{
		`{"stream":"stdout","data":"partial"}`,
		`{"stream":"error","data":{"code":"sandbox_stream_closed","message":"closed"}}`,
	}, nil)
	c, _ := newTestClient(t, f, nil)
	stdout, _, err := c.ReadAllLogs(context.Background(), "sbx_1", "cmd_1")
	var se *StreamError
	if !errors.As(err, &se) || se.Code != CodeSandboxStreamClosed || stdout != "partial" {
		t.Errorf("stdout %q err %v", stdout, err)
	}
}

func TestTailBufferKeepsTheEnd(t *testing.T) {
	var b tailBuffer
	chunk := strings.Repeat("x", 1<<20)
	for range 10 {
		b.WriteString(chunk)
	}
	b.WriteString("END")
	s := b.String()
	if len(s) != MaxCollectedOutput || !strings.HasSuffix(s, "END") {
		t.Errorf("len %d, suffix %q", len(s), s[len(s)-3:])
	}
}

func TestNDJSONLongLinesAndNoTrailingNewline(t *testing.T) {
	long := strings.Repeat("a", 200<<10) // longer than the bufio buffer
	in := `{"stream":"stdout","data":"` + long + `"}` + "\r\n" + `{"stream":"stderr","data":"tail"}`
	d := newNDJSONDecoder(strings.NewReader(in), "test")
	r, err := d.next()
	if err != nil || r.Data != long {
		t.Fatalf("long line: %v (len %d)", err, len(r.Data))
	}
	r, err = d.next()
	if err != nil || r.Data != "tail" || r.Stream != StreamStderr {
		t.Fatalf("last line without newline: %+v %v", r, err)
	}
	if _, err := d.next(); err != io.EOF {
		t.Fatalf("end: %v", err)
	}
	d = newNDJSONDecoder(strings.NewReader(strings.Repeat("x", 100)), "test")
	d.maxLine = 10
	var pe *ProtocolError
	if _, err := d.next(); !errors.As(err, &pe) || !errors.Is(err, errLineTooLong) {
		t.Errorf("overlong line: %v", err)
	}
}
