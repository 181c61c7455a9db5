package controllers

import (
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net/url"
	"strings"
	"testing"
)

// A canary: a secret value that must never survive scrubbing, in any of the
// forms a command may print it.
const canary = "sk_live_C4nary+/Value?&=42"

// leaks reports the pieces of the canary (or of an encoding of it) found in
// s: any 8 consecutive characters of the value, its hex or its base64 — more
// than the few edge characters base64 alignment lets through.
func leaks(s string) []string {
	var found []string
	b64 := base64.StdEncoding.EncodeToString([]byte(canary))
	for _, form := range []string{canary, hex.EncodeToString([]byte(canary)), strings.TrimRight(b64, "=")[4 : len(b64)-4]} {
		for i := 0; i+8 <= len(form); i++ {
			if strings.Contains(s, form[i:i+8]) {
				found = append(found, form[i:i+8])
			}
		}
	}
	return found
}

func TestScrubCanary(t *testing.T) {
	b64 := func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
	for name, out := range map[string]string{
		"plain":                        "token=" + canary + "\n",
		"twice":                        canary + " and " + canary,
		"base64 (echo -n | base64)":    b64(canary),
		"base64 with newline (echo)":   b64(canary + "\n"),
		"base64 after 1 byte":          b64("X" + canary),
		"base64 after 2 bytes":         b64("XY" + canary + "\n"),
		"base64 of env line":           b64("API_KEY=" + canary + "\nHOME=/root\n"),
		"base64 url-safe":              base64.URLEncoding.EncodeToString([]byte("K=" + canary)),
		"base64 unpadded":              base64.RawStdEncoding.EncodeToString([]byte(canary)),
		"hex (xxd -p)":                 hex.EncodeToString([]byte(canary)),
		"hex upper":                    strings.ToUpper(hex.EncodeToString([]byte("a" + canary))),
		"url query escape":             "https://evil.example/?k=" + url.QueryEscape(canary),
		"url path escape":              "https://evil.example/" + url.PathEscape(canary),
		"inside other output":          "npm ERR! 401 " + canary + "@registry",
		"base64 of two secrets in env": b64("A=" + canary + "\nB=other-secret-value\n"),
	} {
		t.Run(name, func(t *testing.T) {
			got := scrub(out, []string{canary, "other-secret-value"})
			if l := leaks(got); len(l) > 0 {
				t.Errorf("scrub(%q) = %q still holds %q", out, got, l)
			}
			if !strings.Contains(got, redactedMark) {
				t.Errorf("scrub(%q) = %q marks nothing", out, got)
			}
		})
	}
}

func TestScrubLeavesOtherTextAlone(t *testing.T) {
	for _, s := range []string{"compiling...\nboom", "exit code 3", ""} {
		if got := scrub(s, []string{canary, "abc"}); got != s {
			t.Errorf("scrub(%q) = %q", s, got)
		}
	}
	// Values shorter than minScrubLen would mark ordinary words.
	if got := scrub("a bc", []string{"bc"}); got != "a bc" {
		t.Errorf("a 2-byte value was scrubbed: %q", got)
	}
}

// The tail is scrubbed before it is cut, so a secret straddling the cut
// leaves no suffix; and after a trim of a long output, the piece of a secret
// at the trim point is dropped too.
func TestOutputTailScrubsBeforeCutting(t *testing.T) {
	pad := func(n int) string { return strings.Repeat("x", n) }
	cases := map[string][]string{
		// The reported 2048 bytes start 8 bytes before the canary's end.
		"cut through the secret": {canary + pad(outputTailBytes-8)},
		// The same, the secret in a record of its own.
		"cut, records split": {"start\n", canary[:10], canary[10:], pad(outputTailBytes - 8)},
		// The canary base64-encoded, cut in the middle.
		"cut through base64": {base64.StdEncoding.EncodeToString([]byte(canary)) + pad(outputTailBytes-12)},
	}
	// A long output that ends in secrets only: the trim that bounds memory
	// cuts one of them, at every offset; the scrubbed tail is shorter than
	// outputTailBytes, so it reaches back to the trim point.
	for shift := range len(canary) {
		cases[fmt.Sprintf("trim through the secret at offset %d", shift)] = []string{pad(64*outputTailBytes + shift), strings.Repeat(canary, 200)}
	}
	for name, chunks := range cases {
		t.Run(name, func(t *testing.T) {
			tail := newOutputTail([]string{canary})
			for _, c := range chunks {
				tail.write(c)
			}
			got := tail.String()
			if l := leaks(got); len(l) > 0 {
				t.Errorf("tail holds %q of the canary:\n%q", l, got)
			}
			if len(got) > outputTailBytes+3 {
				t.Errorf("tail is %d bytes, want at most %d", len(got), outputTailBytes+3)
			}
		})
	}
	// Without secrets the tail is the output's end.
	tail := newOutputTail(nil)
	tail.write(pad(5000) + "END")
	if got := tail.String(); !strings.HasSuffix(got, "END") || !strings.HasPrefix(got, "...") || len(got) != outputTailBytes+3 {
		t.Errorf("tail of %d bytes = %d bytes %q...", 5003, len(got), got[:10])
	}
}

func TestSentSecretsRemembersRotatedValues(t *testing.T) {
	var m sentSecrets
	m.remember("uid-1", []string{"old-value-1"})
	m.remember("uid-2", []string{"other-object"})
	got := m.with("uid-1", []string{"new-value-1"})
	if strings.Join(got, ",") != "new-value-1,old-value-1" {
		t.Errorf("with = %q, want the current and the sent value", got)
	}
	if s := scrub("ran with old-value-1", got); strings.Contains(s, "old-value-1") {
		t.Errorf("the value sent before a rotation was not scrubbed: %q", s)
	}
	for i := range maxSentPerObject + 10 {
		m.remember("uid-1", []string{strings.Repeat("v", 4+i)})
	}
	if n := len(m.with("uid-1", nil)); n != maxSentPerObject {
		t.Errorf("remembered %d values for one object, want the bound %d", n, maxSentPerObject)
	}
}
