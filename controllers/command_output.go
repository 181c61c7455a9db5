package controllers

import (
	"context"
	"strings"
)

// outputTailBytes bounds how much of a failed command's output (a setup
// command, a build step) status carries.
const outputTailBytes = 2048

// commandOutputTail returns the last outputTailBytes of a finished command's
// output, stdout and stderr interleaved as they were written, scrubbed of the
// secrets and their encodings.
func commandOutputTail(ctx context.Context, api SandboxAPI, sessionID, cmdID string, secrets []string) (string, error) {
	stream, err := api.CommandLogs(ctx, sessionID, cmdID)
	if err != nil {
		return "", err
	}
	defer stream.Close()
	t := newOutputTail(secrets)
	for {
		rec, err := stream.Next()
		if err != nil {
			break
		}
		t.write(rec.Data)
	}
	return t.String(), nil
}

// outputTail keeps the end of a command's output in bounded memory and
// reports it scrubbed. It scrubs before it cuts: cutting first could split a
// secret and leave a piece that no longer matches.
type outputTail struct {
	secrets []string
	// margin is the longest pattern scrub replaces: a cut may split one
	// that long.
	margin  int
	buf     strings.Builder
	trimmed bool
}

func newOutputTail(secrets []string) *outputTail {
	return &outputTail{secrets: secrets, margin: longestPattern(secrets)}
}

func (t *outputTail) keep() int { return outputTailBytes + 2*t.margin }

func (t *outputTail) write(s string) {
	t.buf.WriteString(s)
	// Chatty commands: only a tail is kept, with room before the reported
	// part for a pattern the trim may split.
	if t.buf.Len() > 64*outputTailBytes+t.keep() {
		s := t.buf.String()
		t.buf.Reset()
		t.buf.WriteString(s[len(s)-t.keep():])
		t.trimmed = true
	}
}

// String is the scrubbed tail, at most outputTailBytes after a "..." that
// marks a cut.
func (t *outputTail) String() string {
	s := scrub(t.buf.String(), t.secrets)
	if t.trimmed {
		// The first bytes may be the end of a secret the trim cut, which
		// scrub cannot recognise: drop them. Scrub changes nothing before
		// its first match, so they are still the first bytes.
		s = s[min(t.margin, len(s)):]
	}
	s = strings.TrimSpace(s)
	if t.trimmed || len(s) > outputTailBytes {
		s = "..." + s[max(0, len(s)-outputTailBytes):]
	}
	return s
}
