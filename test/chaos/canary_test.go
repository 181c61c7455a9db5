package chaos

import (
	"encoding/base64"
	"encoding/json"
	"math/rand/v2"
	"testing"
)

func TestCanaryScan(t *testing.T) {
	c := newCanaries()
	rng := rand.New(rand.NewPCG(1, 2))
	v := c.next(rng)
	if len(v) != len(canaryPrefix)+16 || v[:len(canaryPrefix)] != canaryPrefix {
		t.Fatalf("canary %q", v)
	}
	secretJSON, _ := json.Marshal(map[string][]byte{"token": []byte(v)}) // base64, as Secret data
	for _, tc := range []struct {
		name, data string
		want       string // value recorded; "" = nothing found
	}{
		{"raw in a log line", `{"msg":"Created","env":"` + v + `"}`, v},
		{"cut short", "tail of output: " + v[:len(canaryPrefix)+5] + "\n", v[:len(canaryPrefix)+5]},
		{"base64 as in Secret data", string(secretJSON), "base64:" + v},
		{"base64 without padding", base64.RawStdEncoding.EncodeToString([]byte(v)), "base64:" + v},
		{"redacted", `{"message":"create sandbox: [redacted]"}`, ""},
		{"a word that merely starts alike", "xcanar and canary-", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCanaries()
			c.scan("logs", "f", []byte(tc.data))
			leaks := c.leaks()
			switch {
			case tc.want == "" && len(leaks) != 0:
				t.Fatalf("found %+v in %q", leaks, tc.data)
			case tc.want != "" && (len(leaks) != 1 || leaks[0].value != tc.want):
				t.Fatalf("found %+v in %q, want one leak %q", leaks, tc.data, tc.want)
			}
		})
	}
	// The same canary found twice in one place counts once; in two places, twice.
	c.scan("logs", "a.log", []byte(v+" "+v))
	c.scan("events", "event x", []byte(v))
	if n := len(c.leaks()); n != 2 {
		t.Fatalf("%d leaks, want 2: %+v", n, c.leaks())
	}
}
