package vercel

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"
)

// DefaultTokenReloadInterval is how often a token file is read again. The
// kubelet brings a rotated Secret into a pod's volume within about a minute;
// reading a few bytes every few seconds costs nothing next to that.
const DefaultTokenReloadInterval = 5 * time.Second

// tokenSource is the bearer token of a Client: a fixed one, or one read from
// a file (Config.TokenFile) and read again when it may have changed, so a
// rotated Secret is used without a restart.
type tokenSource struct {
	file     string        // "" for a fixed token
	interval time.Duration // between reads of file

	mu     sync.Mutex
	token  string
	readAt time.Time
	// err is why the last read of file failed (the previous token is still
	// used meanwhile); nil after a good read.
	err error
}

// readTokenFile reads a token from file. Secrets mounted from files often
// end in a newline; it is trimmed.
func readTokenFile(file string) (string, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		// The path is not secret; the file's content never appears here.
		return "", fmt.Errorf("vercel: read token file: %w", err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", fmt.Errorf("vercel: token file %s is empty", file)
	}
	if err := checkTokenChars(tok); err != nil {
		return "", err
	}
	return tok, nil
}

func checkTokenChars(tok string) error {
	for _, r := range tok {
		if r < 0x21 || r > 0x7e {
			return errors.New("vercel: token contains characters not allowed in an HTTP header")
		}
	}
	return nil
}

// get returns the token to send now, reading the file again when the last
// read is older than the interval.
func (s *tokenSource) get(now time.Time) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.file != "" && now.Sub(s.readAt) >= s.interval {
		s.readLocked(now)
	}
	return s.token
}

// reload reads the file at once — after Vercel rejected the token, the Secret
// may just have been rotated — and reports whether the token changed. A
// fixed token never changes. Reads are at most one a second, so a burst of
// rejected requests does not become a burst of reads.
func (s *tokenSource) reload(now time.Time) bool {
	if s.file == "" {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if now.Sub(s.readAt) < time.Second {
		return false
	}
	old := s.token
	s.readLocked(now)
	return s.token != old
}

func (s *tokenSource) readLocked(now time.Time) {
	s.readAt = now
	tok, err := readTokenFile(s.file)
	if err != nil {
		// Mid-rotation or a broken mount: keep the last good token; if it
		// no longer works, Vercel's 401s say so on every object.
		s.err = err
		return
	}
	s.token, s.err = tok, nil
}

// current is the token last read, for scrubbing it out of answers.
func (s *tokenSource) current() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.token
}

// TokenFileError is why the token file could not be read the last time it
// was (the previous token is still in use), or nil. It never contains the
// token.
func (c *Client) TokenFileError() error {
	c.tokens.mu.Lock()
	defer c.tokens.mu.Unlock()
	return c.tokens.err
}
