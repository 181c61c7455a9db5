package egress

import (
	"bufio"
	"net"
	"sync"
	"sync/atomic"
)

// This file holds the connection plumbing of one Serve: byte counting for
// the usage counters, the set of live connections closed when the listener
// closes, and the listener that hands TLS-terminated connections to the
// inner HTTP server.

// countingListener wraps accepted connections in countingConn.
type countingListener struct {
	net.Listener
	st *serveState
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &countingConn{Conn: c, st: l.st}, nil
}

// countingConn counts bytes read from the sandbox (egress) and written to it
// (ingress), and reports them once, when it closes.
type countingConn struct {
	net.Conn
	st              *serveState
	egress, ingress atomic.Int64
	reported        sync.Once
}

func (c *countingConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.egress.Add(int64(n))
	return n, err
}

func (c *countingConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	c.ingress.Add(int64(n))
	return n, err
}

func (c *countingConn) Close() error {
	err := c.Conn.Close()
	c.reported.Do(func() { c.st.report(c.egress.Load(), c.ingress.Load()) })
	return err
}

// bufferedConn reads first what a bufio.Reader already holds.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufferedConn) Read(b []byte) (int, error) { return c.r.Read(b) }

// innerConn is a connection from a CONNECT whose HTTP requests the proxy
// reads itself; it carries the destination the CONNECT named.
type innerConn struct {
	net.Conn
	scheme string
	dest   string // host:port from the CONNECT line
}

// chanListener is the inner HTTP server's listener: the CONNECT handler
// pushes connections into it.
type chanListener struct {
	ch     chan net.Conn
	done   chan struct{}
	closed sync.Once
}

func newChanListener() *chanListener {
	return &chanListener{ch: make(chan net.Conn), done: make(chan struct{})}
}

func (l *chanListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ch:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// push hands c to the inner server, or closes it if the server is gone.
func (l *chanListener) push(c net.Conn) {
	select {
	case l.ch <- c:
	case <-l.done:
		_ = c.Close()
	}
}

func (l *chanListener) Close() error {
	l.closed.Do(func() { close(l.done) })
	return nil
}

func (l *chanListener) Addr() net.Addr { return &net.TCPAddr{} }

// serveState is what one Serve shares between its handlers.
type serveState struct {
	p    *Proxy
	sess Session

	mu     sync.Mutex
	closed bool
	conns  map[net.Conn]struct{} // hijacked: the HTTP servers no longer track them
	wg     sync.WaitGroup
}

// enter registers a running handler; false once Serve is shutting down.
func (st *serveState) enter() bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.closed {
		return false
	}
	st.wg.Add(1)
	return true
}

func (st *serveState) leave() { st.wg.Done() }

// track registers a hijacked connection; false (and closed) when shutting down.
func (st *serveState) track(c net.Conn) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.closed {
		_ = c.Close()
		return false
	}
	st.conns[c] = struct{}{}
	return true
}

func (st *serveState) untrack(c net.Conn) {
	st.mu.Lock()
	delete(st.conns, c)
	st.mu.Unlock()
}

// shutdown closes every hijacked connection and waits for the handlers.
func (st *serveState) shutdown() {
	st.mu.Lock()
	st.closed = true
	for c := range st.conns {
		_ = c.Close()
	}
	st.mu.Unlock()
	st.wg.Wait()
}

func (st *serveState) report(egress, ingress int64) {
	if st.p.opts.OnTransfer != nil && (egress != 0 || ingress != 0) {
		st.p.opts.OnTransfer(st.sess, egress, ingress)
	}
}
