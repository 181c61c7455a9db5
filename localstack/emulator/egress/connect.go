package egress

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"
)

// This file handles CONNECT: a raw tunnel to a destination without L7
// rules, or, for a domain with rules, TLS terminated with a leaf from the
// proxy's CA so the proxy can read the requests.

const connectOK = "HTTP/1.1 200 Connection established\r\n\r\n"

func (p *Proxy) serveConnect(st *serveState, inner *chanListener, w http.ResponseWriter, r *http.Request) {
	dest := r.Host
	t, rf := p.decide(r.Context(), st.sess.Policy(), dest, "443")
	if rf != nil {
		p.refuse(w, r.Method, hostOnly(dest), rf)
		return
	}
	if t.dom.hasRules() {
		p.terminate(st, inner, w, dest, t)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), p.opts.DialTimeout)
	up, err := p.dial(ctx, t.addr)
	cancel()
	if err != nil {
		p.refuse(w, r.Method, t.host, &refusal{status: http.StatusBadGateway, reason: "connect failed",
			body: fmt.Sprintf("The egress proxy cannot connect to %s.\n", t.host)})
		return
	}
	c, brw, err := w.(http.Hijacker).Hijack()
	if err != nil {
		_ = up.Close()
		return
	}
	if !st.track(c) {
		_ = up.Close()
		return
	}
	defer st.untrack(c)
	if _, err := io.WriteString(c, connectOK); err != nil {
		_ = c.Close()
		_ = up.Close()
		return
	}
	p.opts.Logf("egress: tunnel to %s", t.host)
	p.pipe(&bufferedConn{Conn: c, r: brw.Reader}, up, p.tunnelGuard(st, dest, t))
}

// tunnelGuard reports whether a tunnel may still carry data: after a policy
// update it checks the destination again and closes the tunnel if the new
// policy refuses it or now wants to read its requests (the client then
// reconnects and meets the new policy). Data read after the update is not
// forwarded before that check.
func (p *Proxy) tunnelGuard(st *serveState, dest string, t *target) func() bool {
	var mu sync.Mutex
	pol := st.sess.Policy()
	return func() bool {
		mu.Lock()
		defer mu.Unlock()
		cur := st.sess.Policy()
		if cur == pol {
			return true
		}
		nt, rf := p.decide(context.Background(), cur, dest, "443")
		if rf != nil || nt.dom.hasRules() || nt.addr != t.addr {
			p.opts.Logf("egress: closed tunnel to %s after a policy update", t.host)
			return false
		}
		pol = cur
		return true
	}
}

// pipe copies both ways until either side ends, both are idle for
// IdleTimeout or allowed() says no, then closes both.
func (p *Proxy) pipe(a, b net.Conn, allowed func() bool) {
	touch := func() {
		d := time.Now().Add(p.opts.IdleTimeout)
		_ = a.SetDeadline(d)
		_ = b.SetDeadline(d)
	}
	touch()
	done := make(chan struct{}, 2)
	cp := func(dst, src net.Conn) {
		defer func() { done <- struct{}{} }()
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				touch()
				if !allowed() {
					return
				}
				if _, werr := dst.Write(buf[:n]); werr != nil {
					return
				}
			}
			if err != nil {
				return
			}
		}
	}
	go cp(a, b)
	go cp(b, a)
	<-done
	_ = a.Close()
	_ = b.Close()
	<-done
}

// terminate answers the CONNECT, then reads the client's TLS (or plain
// HTTP, for a CONNECT to port 80) and hands the connection to the inner
// HTTP server.
func (p *Proxy) terminate(st *serveState, inner *chanListener, w http.ResponseWriter, dest string, t *target) {
	c, brw, err := w.(http.Hijacker).Hijack()
	if err != nil {
		return
	}
	if !st.track(c) {
		return
	}
	defer st.untrack(c)
	_ = c.SetDeadline(time.Now().Add(p.opts.TLSHandshakeTimeout))
	if _, err := io.WriteString(c, connectOK); err != nil {
		_ = c.Close()
		return
	}
	bc := &bufferedConn{Conn: c, r: brw.Reader}
	first, err := brw.Reader.Peek(1)
	if err != nil {
		_ = c.Close()
		return
	}
	if first[0] != 0x16 { // not a TLS handshake record: plain HTTP in the tunnel
		_ = c.SetDeadline(time.Time{})
		inner.push(&innerConn{Conn: bc, scheme: "http", dest: dest})
		return
	}
	tc := tls.Server(bc, p.tlsConfig(t.host))
	ctx, cancel := context.WithTimeout(context.Background(), p.opts.TLSHandshakeTimeout)
	err = tc.HandshakeContext(ctx)
	cancel()
	if err != nil {
		p.opts.Logf("egress: TLS handshake with sandbox for %s failed", t.host)
		_ = c.Close()
		return
	}
	_ = c.SetDeadline(time.Time{})
	p.opts.Logf("egress: terminated TLS for %s (domain has rules)", t.host)
	inner.push(&innerConn{Conn: tc, scheme: "https", dest: dest})
}

// tlsConfig serves a leaf for host only: a ClientHello naming another
// server is refused, so SNI cannot disagree with the CONNECT the policy
// checked. Only HTTP/1.1 is offered.
func (p *Proxy) tlsConfig(host string) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"http/1.1"},
		GetCertificate: func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
			if hello.ServerName != "" && normalizeHost(hello.ServerName) != host {
				return nil, fmt.Errorf("server name does not match the CONNECT destination")
			}
			return p.ca.leaf(host)
		},
	}
}
