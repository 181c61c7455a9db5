package vercel

import (
	"bytes"
	"context"
	"errors"
	"io"
	"testing"
)

// FuzzNDJSONDecode feeds arbitrary bytes to the command-stream and log-stream
// decoders. Whatever the server sends, the decoder must not panic, must
// terminate, must return only well-formed records, and must report one
// sticky error at the end: io.EOF only after a final command record for a
// command stream, a typed error otherwise.
func FuzzNDJSONDecode(f *testing.F) {
	for _, seed := range []string{
		cmdStart + "\n" + `{"stream":"stdout","data":"hi\n"}` + "\n" + cmdEnd + "\n",
		cmdStart + "\n" + `{"stream":"error","data":{"code":"sandbox_stream_closed","message":"closed"}}` + "\n",
		cmdStart + "\n",
		"\n\n  \r\n",
		`{"stream":"stdout","data":null}`,
		`{"stream":"error","data":"plain"}`,
		`{"command":null}` + "\n" + `[1,2]`,
		`{"stream":"stdout","data":"a\u0000b"}` + "\n" + `{"stream":"stderr","data":"\ud800"}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		ctx := context.Background()
		c := &Client{}

		cs := &CommandStream{stream: newStream(ctx, c, EPRunCommand, io.NopCloser(bytes.NewReader(in)))}
		var last error
		sawFinal := false
		// Each call consumes at least one line, so len(in)+2 calls suffice.
		for i := 0; i <= len(in)+2; i++ {
			rec, err := cs.Next()
			if err != nil {
				last = err
				break
			}
			checkRecord(t, rec)
			if rec.Command != nil && rec.Command.ExitCode != nil {
				sawFinal = true
			}
		}
		if last == nil {
			t.Fatal("command stream did not terminate")
		}
		if again, _ := cs.Next(); again.Command != nil || again.Stream != "" {
			t.Fatal("record after the end")
		}
		if _, again := cs.Next(); again != last {
			t.Fatalf("error not sticky: %v then %v", last, again)
		}
		if (last == io.EOF) != sawFinal {
			t.Fatalf("io.EOF=%v but final record seen=%v", last == io.EOF, sawFinal)
		}
		checkTypedError(t, last)

		ls := &LogStream{stream: newStream(ctx, c, EPCommandLogs, io.NopCloser(bytes.NewReader(in)))}
		last = nil
		for i := 0; i <= len(in)+2; i++ {
			rec, err := ls.Next()
			if err != nil {
				last = err
				break
			}
			if rec.Command != nil {
				t.Fatal("log stream returned a command record")
			}
			checkRecord(t, rec)
		}
		if last == nil {
			t.Fatal("log stream did not terminate")
		}
		checkTypedError(t, last)
	})
}

func checkRecord(t *testing.T, rec Record) {
	t.Helper()
	switch {
	case rec.Command != nil:
		if rec.Stream != "" || rec.Data != "" {
			t.Fatalf("mixed record %+v", rec)
		}
	case rec.Stream == StreamStdout || rec.Stream == StreamStderr:
	default:
		t.Fatalf("record of unknown kind %+v", rec)
	}
}

func checkTypedError(t *testing.T, err error) {
	t.Helper()
	var se *StreamError
	var pe *ProtocolError
	if err != io.EOF && !errors.As(err, &se) && !errors.As(err, &pe) {
		t.Fatalf("untyped error %T %v", err, err)
	}
	if se != nil && se.Code == "" {
		t.Fatal("stream error without a code")
	}
}
