package controllers

import (
	"encoding/base64"
	"encoding/hex"
	"net/url"
	"slices"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/types"
)

// redactedMark replaces a secret value (or an encoding of it) in anything the
// controller reports.
const redactedMark = "[redacted]"

// minScrubLen is the shortest secret value scrubbed: shorter ones would mark
// ordinary words.
const minScrubLen = 4

// scrub replaces every known secret value in s, and its base64, hex and URL
// encodings, so that an error or output that echoes one — `printenv | base64`
// in a failing setup step — never reaches status, events or logs. Longer
// patterns are replaced first, so a value that contains another is removed
// whole.
func scrub(s string, secrets []string) string {
	patterns := scrubPatterns(secrets)
	if len(patterns) == 0 {
		return s
	}
	pairs := make([]string, 0, 2*len(patterns))
	for _, p := range patterns {
		pairs = append(pairs, p, redactedMark)
	}
	return strings.NewReplacer(pairs...).Replace(s)
}

// scrubPatterns returns the strings that reveal one of the secrets: each
// value, its URL escapes, its hex forms and its base64 forms, longest first.
func scrubPatterns(secrets []string) []string {
	seen := map[string]bool{}
	var out []string
	add := func(p string) {
		if len(p) >= minScrubLen && !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	for _, v := range secrets {
		if len(v) < minScrubLen {
			continue
		}
		add(v)
		add(url.QueryEscape(v))
		add(url.PathEscape(v))
		h := hex.EncodeToString([]byte(v))
		add(h)
		add(strings.ToUpper(h))
		for _, b := range base64Forms(v) {
			add(b)
		}
	}
	// strings.Replacer tries patterns in argument order at each position.
	slices.SortStableFunc(out, func(a, b string) int { return len(b) - len(a) })
	return out
}

// base64Forms returns the parts of v's base64 encoding that appear whatever
// precedes and follows v in the encoded data: base64 encodes 3-byte groups,
// so `echo "KEY=$SECRET" | base64` encodes the secret at one of three
// alignments, and only the 4-character groups made of the secret's bytes
// alone are fixed. Both alphabets (standard and URL-safe) are covered.
func base64Forms(v string) []string {
	var out []string
	for offset := range 3 {
		data := append(make([]byte, offset), v...)
		enc := base64.StdEncoding.EncodeToString(data)
		start := 0
		if offset > 0 {
			start = 4 // the first group mixes in what precedes the secret
		}
		end := 4 * (len(data) / 3) // the last full group made of the secret's bytes
		if end-start < minScrubLen {
			continue
		}
		fixed := enc[start:end]
		out = append(out, fixed, strings.NewReplacer("+", "-", "/", "_").Replace(fixed))
		if offset == 0 {
			// The whole encoding, padding included, when the value is all
			// that was encoded.
			out = append(out, enc, base64.URLEncoding.EncodeToString(data), base64.RawStdEncoding.EncodeToString(data), base64.RawURLEncoding.EncodeToString(data))
		}
	}
	return out
}

// longestPattern is the length of the longest string scrub replaces for
// secrets: output cut anywhere may hold a piece of one that long.
func longestPattern(secrets []string) int {
	if p := scrubPatterns(secrets); len(p) > 0 {
		return len(p[0])
	}
	return 0
}

// redactedError carries an error whose message had secret values removed,
// keeping the original in the chain so errors.As still classifies it.
type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }

// redact returns err with every known secret value removed from its message.
func redact(err error, secrets []string) error {
	msg := scrub(err.Error(), secrets)
	if msg == err.Error() {
		return err
	}
	return &redactedError{msg: msg, err: err}
}

// sentSecrets remembers, per object, the Secret values this process sent to
// Vercel for it (sandbox env, injected headers, clone credentials). A
// command's output is scrubbed of these as well as of the Secrets' current
// values: a Secret rotated while the command ran would otherwise leave the
// value it ran with unscrubbed. The memory is the process's: a restarted
// manager knows only the current values (docs/security.md).
type sentSecrets struct {
	mu    sync.Mutex
	byUID map[types.UID][]string
}

// Bounds of the memory: values kept per object (the newest) and objects.
const (
	maxSentPerObject = 64
	maxSentObjects   = 4096
)

// remember records values sent to Vercel for the object uid.
func (m *sentSecrets) remember(uid types.UID, values []string) {
	if len(values) == 0 {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.byUID == nil {
		m.byUID = map[types.UID][]string{}
	}
	if _, ok := m.byUID[uid]; !ok && len(m.byUID) >= maxSentObjects {
		for k := range m.byUID { // any one: the bound matters, not which
			delete(m.byUID, k)
			break
		}
	}
	list := m.byUID[uid]
	for _, v := range values {
		if !slices.Contains(list, v) {
			list = append(list, v)
		}
	}
	if n := len(list); n > maxSentPerObject {
		list = slices.Clone(list[n-maxSentPerObject:])
	}
	m.byUID[uid] = list
}

// with returns values plus those remembered for uid.
func (m *sentSecrets) with(uid types.UID, values []string) []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append(slices.Clone(values), m.byUID[uid]...)
}
