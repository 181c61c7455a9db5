package controllers

import (
	"context"
	"strings"
)

// outputTailBytes bounds how much of a failed command's output (a setup
// command, a build step) status carries.
const outputTailBytes = 2048

// commandOutputTail returns the last outputTailBytes of a finished command's
// output, stdout and stderr interleaved as they were written. Callers scrub
// secret values from it before it reaches status or events.
func commandOutputTail(ctx context.Context, api SandboxAPI, sessionID, cmdID string) (string, error) {
	stream, err := api.CommandLogs(ctx, sessionID, cmdID)
	if err != nil {
		return "", err
	}
	defer stream.Close()
	var out strings.Builder
	for {
		rec, err := stream.Next()
		if err != nil {
			break
		}
		out.WriteString(rec.Data)
		// Keep memory bounded on chatty commands: only the tail is reported.
		if out.Len() > 64*outputTailBytes {
			s := out.String()
			out.Reset()
			out.WriteString(s[len(s)-outputTailBytes:])
		}
	}
	s := strings.TrimSpace(out.String())
	if len(s) > outputTailBytes {
		s = "..." + s[len(s)-outputTailBytes:]
	}
	return s, nil
}
