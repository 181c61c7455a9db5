package chaos

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"sync"
)

// canaryPrefix starts every Secret value of the workload. Nothing else in
// the system produces it, so any occurrence in a log, an event or a status
// (whole or cut short, raw or base64-encoded as Secret data is in JSON) is a
// leak.
const canaryPrefix = "xcanary-"

var (
	rawMarker = []byte(canaryPrefix)
	// The base64 form of a value starting with the prefix starts with the
	// encoding of its first six bytes.
	b64Marker = []byte(base64.StdEncoding.EncodeToString([]byte(canaryPrefix[:6])))
)

// canaries issues canary values and records where they were found.
type canaries struct {
	mu     sync.Mutex
	values map[string]bool
	found  map[string]leak // by place, where and value
}

// leak is one canary found in one place.
type leak struct {
	place string // "manager logs", "events", "status"
	where string // file, or object
	value string // the canary, or what follows the marker when cut short
}

func newCanaries() *canaries {
	return &canaries{values: map[string]bool{}, found: map[string]leak{}}
}

// next returns a new canary value.
func (c *canaries) next(rng *rand.Rand) string {
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	b := []byte(canaryPrefix)
	for range 16 {
		b = append(b, alphabet[rng.IntN(len(alphabet))])
	}
	v := string(b)
	c.mu.Lock()
	c.values[v] = true
	c.mu.Unlock()
	return v
}

// scan records every canary (or piece of one) in data.
func (c *canaries) scan(place, where string, data []byte) {
	for _, m := range []struct {
		marker []byte
		b64    bool
	}{{rawMarker, false}, {b64Marker, true}} {
		rest := data
		for {
			i := bytes.Index(rest, m.marker)
			if i < 0 {
				break
			}
			c.record(place, where, identify(rest[i:], m.b64))
			rest = rest[i+len(m.marker):]
		}
	}
}

// identify returns the canary at the start of b (base64-encoded when b64).
func identify(b []byte, b64 bool) string {
	const n = len(canaryPrefix) + 16
	if b64 {
		enc := b[:min(len(b), base64.StdEncoding.EncodedLen(n))]
		dec := make([]byte, n)
		k, _ := base64.StdEncoding.Decode(dec, enc)
		if k == 0 {
			k, _ = base64.RawStdEncoding.Decode(dec, enc)
		}
		return "base64:" + string(dec[:k])
	}
	end := len(canaryPrefix)
	for end < len(b) && end < n && (b[end] >= 'a' && b[end] <= 'z' || b[end] >= '0' && b[end] <= '9') {
		end++
	}
	return string(b[:end])
}

func (c *canaries) record(place, where, value string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	key := place + "\x00" + where + "\x00" + value
	if _, ok := c.found[key]; !ok {
		c.found[key] = leak{place: place, where: where, value: value}
	}
}

// scanFile scans a whole file (each manager incarnation has its own log,
// of a few seconds or minutes).
func (c *canaries) scanFile(place, path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	c.scan(place, filepath.Base(path), data)
	return nil
}

// leaks returns what was found, sorted.
func (c *canaries) leaks() []leak {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]leak, 0, len(c.found))
	for _, l := range c.found {
		out = append(out, l)
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		return fmt.Sprint(a.place, a.where, a.value) < fmt.Sprint(b.place, b.where, b.value)
	})
	return out
}

// issued is the number of canary values handed out.
func (c *canaries) issued() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.values)
}
