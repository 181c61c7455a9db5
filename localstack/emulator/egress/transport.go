package egress

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"time"
)

// This file is the upstream side: one http.Transport per Serve that dials
// only the address decide chose (carried in the request context) and
// verifies upstream certificates against the system roots and
// Options.UpstreamRoots. Never InsecureSkipVerify.

func netipParse(s string) (netip.Addr, error) { return netip.ParseAddr(s) }

func (p *Proxy) transport() *http.Transport {
	return &http.Transport{
		Proxy: nil,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			addr, _ := ctx.Value(dialKey{}).(string)
			if addr == "" {
				return nil, errors.New("no checked address to dial")
			}
			return p.dial(ctx, addr)
		},
		DialTLSContext:         p.dialTLS,
		TLSHandshakeTimeout:    p.opts.TLSHandshakeTimeout,
		DisableCompression:     true, // pass Accept-Encoding as the sandbox sent it
		MaxIdleConnsPerHost:    4,
		IdleConnTimeout:        90 * time.Second,
		ExpectContinueTimeout:  time.Second,
		MaxResponseHeaderBytes: int64(p.opts.MaxHeaderBytes),
	}
}

// dialTLS dials the checked address and verifies the upstream as the
// request's host. A certificate from an unknown authority is retried once
// with the other root set: a *x509.CertPool cannot be merged with the
// system pool, and each attempt is a full verification.
func (p *Proxy) dialTLS(ctx context.Context, _, hostport string) (net.Conn, error) {
	addr, _ := ctx.Value(dialKey{}).(string)
	if addr == "" {
		return nil, errors.New("no checked address to dial")
	}
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		return nil, err
	}
	pools := []*x509.CertPool{nil} // nil = system roots
	if p.opts.UpstreamRoots != nil {
		pools = []*x509.CertPool{nil, p.opts.UpstreamRoots}
		if _, mapped := p.hosts[normalizeHost(host)]; mapped || p.isMappedAny(normalizeHost(host)) {
			pools[0], pools[1] = pools[1], pools[0]
		}
	}
	var lastErr error
	for _, pool := range pools {
		raw, err := p.dial(ctx, addr)
		if err != nil {
			return nil, err
		}
		tc := tls.Client(raw, &tls.Config{ServerName: host, RootCAs: pool, MinVersion: tls.VersionTLS12,
			NextProtos: []string{"http/1.1"}})
		hctx, cancel := context.WithTimeout(ctx, p.opts.TLSHandshakeTimeout)
		err = tc.HandshakeContext(hctx)
		cancel()
		if err == nil {
			return tc, nil
		}
		_ = raw.Close()
		lastErr = err
		var ua x509.UnknownAuthorityError
		if !errors.As(err, &ua) {
			return nil, err
		}
	}
	return nil, lastErr
}

// isMappedAny reports whether host is mapped under any port.
func (p *Proxy) isMappedAny(host string) bool {
	for k := range p.hosts {
		if h, _, err := net.SplitHostPort(k); err == nil && h == host {
			return true
		}
	}
	return false
}
