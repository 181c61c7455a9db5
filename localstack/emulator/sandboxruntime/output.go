package sandboxruntime

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"unicode/utf8"
)

// maxOutputBytes caps how much output one command keeps in memory. A command that
// prints more gets one final stderr notice and the rest is discarded, so a runaway
// `yes` cannot take the emulator down. Real sandboxes have a similar (unspecified) cap.
const maxOutputBytes = 64 << 20

// outputTruncatedNotice is the record appended once when maxOutputBytes is reached.
const outputTruncatedNotice = "\n[sandbox emulator: output truncated after 64 MiB]\n"

// OutputBudget is how many bytes of output all the commands of one session
// may keep together (Command.OutputBudget). A command whose output would
// exceed what is left gets one stderr notice, and the rest of its output is
// dropped, as at the per-command cap. It is safe for concurrent use.
type OutputBudget struct {
	total int64
	left  atomic.Int64
}

// NewOutputBudget returns a budget of n bytes; n <= 0 is unlimited (nil).
func NewOutputBudget(n int64) *OutputBudget {
	if n <= 0 {
		return nil
	}
	b := &OutputBudget{total: n}
	b.left.Store(n)
	return b
}

// Left returns the bytes still available.
func (b *OutputBudget) Left() int64 { return b.left.Load() }

// take reserves n bytes, or reports false when fewer are left: the budget
// is then used up, so no later chunk, however small, slips in after a
// truncation notice.
func (b *OutputBudget) take(n int) bool {
	for {
		left := b.left.Load()
		if left < int64(n) {
			b.left.Store(0)
			return false
		}
		if b.left.CompareAndSwap(left, left-int64(n)) {
			return true
		}
	}
}

// notice is the record appended when the budget is used up.
func (b *OutputBudget) notice() string {
	return fmt.Sprintf("\n[sandbox emulator: output truncated: this session's commands have kept %d bytes of output, "+
		"the emulator's per-session output budget (--session-output-bytes)]\n", b.total)
}

// Record is one chunk of a command's output, as read from the process: a chunk
// is whatever one read returned (not necessarily a line), never splitting a UTF-8
// sequence. Stream is "stdout" or "stderr".
type Record struct {
	Stream string
	Data   string
}

// Output is the append-only, followable log of one command's output. Any number
// of readers may follow it concurrently, from the start, while it grows. Once closed
// (the command has exited and its pipes are drained) it never changes again.
type Output struct {
	mu        sync.Mutex
	budget    *OutputBudget // the session's; nil = only the per-command cap
	records   []Record
	size      int  // bytes of output kept
	truncated bool // maxOutputBytes reached: further output is dropped
	closed    bool
	// changed is closed and replaced whenever records grow or the log closes; a
	// follower waiting for more output selects on the channel it saw last.
	changed chan struct{}
}

// newOutput returns an open, empty log.
func newOutput() *Output {
	return &Output{changed: make(chan struct{})}
}

// closedEmptyLog is shared by every command that never ran (exec mode "none"): it
// costs nothing per command.
var closedEmptyLog = func() *Output {
	l := newOutput()
	l.close()
	return l
}()

// append adds one record and wakes the followers. Appends after close are dropped.
func (l *Output) append(stream, data string) {
	if data == "" {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed || l.truncated {
		return
	}
	switch {
	case l.size+len(data) > maxOutputBytes:
		l.records = append(l.records, Record{Stream: "stderr", Data: outputTruncatedNotice})
		l.truncated = true
	case l.budget != nil && !l.budget.take(len(data)):
		l.records = append(l.records, Record{Stream: "stderr", Data: l.budget.notice()})
		l.truncated = true
	default:
		l.records = append(l.records, Record{Stream: stream, Data: data})
		l.size += len(data)
	}
	close(l.changed)
	l.changed = make(chan struct{})
}

// close marks the log complete and wakes the followers. It is idempotent.
func (l *Output) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return
	}
	l.closed = true
	close(l.changed)
}

// snapshot returns a copy of the records so far and whether the log is closed.
func (l *Output) snapshot() ([]Record, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]Record(nil), l.records...), l.closed
}

// Follow calls fn for every record from the start, then for new ones as they
// arrive, and returns when the command has exited and all records were passed
// (nil), when fn returns an error (that error), or when ctx ends (ctx.Err()).
// fn is never called with the log's lock held, so it may block (e.g. on a slow
// HTTP client) without holding up the command or other followers.
func (l *Output) Follow(ctx context.Context, fn func(Record) error) error {
	next := 0
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		l.mu.Lock()
		batch := l.records[next:len(l.records):len(l.records)]
		closed := l.closed
		changed := l.changed
		l.mu.Unlock()

		for _, rec := range batch {
			if err := fn(rec); err != nil {
				return err
			}
		}
		next += len(batch)
		if len(batch) > 0 {
			continue // more may have arrived while fn ran
		}
		if closed {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// utf8Splitter turns raw reads into record data without cutting a multi-byte UTF-8
// sequence in two (which would turn into two U+FFFD once JSON-encoded): an
// incomplete sequence at the end of a read is held back until the next one.
type utf8Splitter struct {
	pending []byte
}

// push returns the text ready to be emitted after appending p.
func (s *utf8Splitter) push(p []byte) string {
	buf := append(s.pending, p...)
	cut := completeUTF8Prefix(buf)
	out := string(buf[:cut])
	s.pending = append(s.pending[:0], buf[cut:]...)
	return out
}

// flush returns whatever is held back (at end of stream).
func (s *utf8Splitter) flush() string {
	out := string(s.pending)
	s.pending = s.pending[:0]
	return out
}

// completeUTF8Prefix returns the length of b without a trailing, incomplete (but so
// far valid) UTF-8 sequence. Invalid bytes are not held back.
func completeUTF8Prefix(b []byte) int {
	// A sequence is at most 4 bytes, so only the last 3 bytes can start one that is
	// still incomplete.
	for i := len(b) - 1; i >= 0 && i >= len(b)-3; i-- {
		c := b[i]
		if c < utf8.RuneSelf {
			return len(b) // ASCII: nothing pending
		}
		if utf8.RuneStart(c) {
			if !utf8.FullRune(b[i:]) {
				return i
			}
			return len(b)
		}
	}
	return len(b)
}
