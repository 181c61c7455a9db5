package emulator

import (
	"sync"
	"time"
)

// Clock is the emulator's notion of time. Every timestamp the emulator serves
// and every deadline it enforces (session timeouts, pending start, snapshot
// expiry, rate-limit refill) is read from it.
type Clock interface {
	Now() time.Time
}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

// FakeClock is a manually driven Clock for tests. Advance and Set run every
// attached emulator's sweep synchronously, so anything whose deadline has
// passed (sessions timing out, pending sessions starting, snapshots expiring)
// has been handled by the time they return.
type FakeClock struct {
	mu        sync.Mutex
	now       time.Time
	listeners map[int]func()
	nextID    int
}

// NewFakeClock returns a FakeClock reading t.
func NewFakeClock(t time.Time) *FakeClock {
	return &FakeClock{now: t, listeners: map[int]func(){}}
}

// Now returns the current fake time.
func (c *FakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d (negative d is ignored) and sweeps.
func (c *FakeClock) Advance(d time.Duration) {
	if d < 0 {
		d = 0
	}
	c.mu.Lock()
	c.now = c.now.Add(d)
	fns := c.snapshotListeners()
	c.mu.Unlock()
	for _, fn := range fns {
		fn()
	}
}

// Set moves the clock to t (which may be earlier than now) and sweeps.
func (c *FakeClock) Set(t time.Time) {
	c.mu.Lock()
	c.now = t
	fns := c.snapshotListeners()
	c.mu.Unlock()
	for _, fn := range fns {
		fn()
	}
}

func (c *FakeClock) snapshotListeners() []func() {
	fns := make([]func(), 0, len(c.listeners))
	for _, fn := range c.listeners {
		fns = append(fns, fn)
	}
	return fns
}

// onChange registers fn to run after every Advance/Set; the returned func
// unregisters it.
func (c *FakeClock) onChange(fn func()) (cancel func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	id := c.nextID
	c.nextID++
	c.listeners[id] = fn
	return func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		delete(c.listeners, id)
	}
}

// ms converts a time to the wire format (ms since the Unix epoch).
func ms(t time.Time) int64 { return t.UnixMilli() }
