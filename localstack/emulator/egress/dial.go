package egress

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// This file decides whether a destination (host and port) is reachable under
// a policy, and which address to dial. The address is chosen once, from the
// same DNS answer the policy was checked against, so a name cannot resolve
// to an allowed address for the check and a denied one for the dial.

// target is an allowed destination.
type target struct {
	host   string // normalized name or IP literal, without brackets
	port   string
	addr   string  // "ip:port" to dial
	dom    *domain // matched domain (nil: no rules apply)
	isIP   bool
	mapped bool // reached through Options.Hosts
}

// refusal is the proxy's own answer to a destination it will not reach.
type refusal struct {
	status int
	body   string // short text for the sandbox; names only the host
	reason string // for logs
}

func policyRefusal(host string) *refusal {
	return &refusal{status: http.StatusForbidden, reason: "network policy",
		body: fmt.Sprintf("The sandbox's network policy blocks %s.\n", host)}
}

func privateRefusal(host string) *refusal {
	return &refusal{status: http.StatusForbidden, reason: "private address",
		body: fmt.Sprintf("The emulator's egress proxy refuses %s: a loopback, private or link-local address is not reachable from a sandbox.\n", host)}
}

// reason for skipping one candidate address.
type skip int

const (
	skipNone skip = iota
	skipPolicy
	skipPrivate
)

// decide checks hostport (host[:port], port defaulting to defPort) against pol.
func (p *Proxy) decide(ctx context.Context, pol *Policy, hostport, defPort string) (*target, *refusal) {
	t, rf := parseDest(hostport, defPort)
	if rf != nil {
		return nil, rf
	}
	if pol == nil || pol.mode == modeDenyAll {
		return nil, policyRefusal(t.host)
	}
	ip, ipErr := netip.ParseAddr(t.host)
	t.isIP = ipErr == nil
	if pol.mode == modeCustom {
		if !t.isIP {
			t.dom = pol.domainFor(t.host)
		}
		if t.dom == nil && !pol.unmatchedAllowed && len(pol.allowCIDRs) == 0 {
			return nil, policyRefusal(t.host) // nothing could allow it: do not even resolve
		}
	}
	addrs, dialPort, rf := p.resolve(ctx, t, ip)
	if rf != nil {
		return nil, rf
	}
	return p.pick(pol, t, addrs, dialPort)
}

// parseDest splits and normalizes a destination.
func parseDest(hostport, defPort string) (*target, *refusal) {
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		host, port = hostport, defPort
	}
	host = normalizeHost(strings.TrimSuffix(strings.TrimPrefix(host, "["), "]"))
	if len(host) > 253 {
		host = host[:253]
	}
	if host == "" || port == "" {
		return nil, &refusal{status: http.StatusBadRequest, reason: "no host", body: "The request names no destination host.\n"}
	}
	return &target{host: host, port: port}, nil
}

// pick returns t with the first candidate address the policy and the
// private-address rule accept, or the refusal that explains why none is.
func (p *Proxy) pick(pol *Policy, t *target, addrs []netip.Addr, dialPort string) (*target, *refusal) {
	worst := skipNone
	for _, a := range addrs {
		s := p.check(pol, t, a)
		if s == skipNone {
			t.addr = net.JoinHostPort(a.String(), dialPort)
			return t, nil
		}
		if worst == skipNone || s == skipPolicy {
			worst = s
		}
	}
	if worst == skipPrivate {
		return nil, privateRefusal(t.host)
	}
	return nil, policyRefusal(t.host)
}

// resolve returns the candidate addresses of t and the port to dial.
func (p *Proxy) resolve(ctx context.Context, t *target, ip netip.Addr) ([]netip.Addr, string, *refusal) {
	if m, ok := p.lookupHosts(t.host, t.port); ok {
		t.mapped = true
		return []netip.Addr{m.Addr()}, fmt.Sprint(m.Port()), nil
	}
	if t.isIP {
		return []netip.Addr{ip.Unmap()}, t.port, nil
	}
	ctx, cancel := context.WithTimeout(ctx, p.opts.DialTimeout)
	defer cancel()
	addrs, err := net.DefaultResolver.LookupNetIP(ctx, "ip", t.host)
	if err != nil || len(addrs) == 0 {
		return nil, "", &refusal{status: http.StatusBadGateway, reason: "DNS lookup failed",
			body: fmt.Sprintf("The egress proxy cannot resolve %s.\n", t.host)}
	}
	for i := range addrs {
		addrs[i] = addrs[i].Unmap()
	}
	return addrs, t.port, nil
}

// lookupHosts finds host:port, then host, in Options.Hosts.
func (p *Proxy) lookupHosts(host, port string) (netip.AddrPort, bool) {
	if a, ok := p.hosts[net.JoinHostPort(host, port)]; ok {
		return a, true
	}
	a, ok := p.hosts[host]
	return a, ok
}

// check applies the policy's subnets and the private-address rule to one
// candidate address. Denied subnets win over everything; allowed subnets
// admit addresses whose name no domain allows.
func (p *Proxy) check(pol *Policy, t *target, a netip.Addr) skip {
	if pol.mode == modeCustom {
		if inPrefixes(pol.denyCIDRs, a) {
			return skipPolicy
		}
		if t.dom == nil && !pol.unmatchedAllowed && !inPrefixes(pol.allowCIDRs, a) {
			return skipPolicy
		}
	}
	if !t.mapped && !p.opts.AllowPrivateDestinations && isPrivate(a) {
		return skipPrivate
	}
	return skipNone
}

func inPrefixes(list []netip.Prefix, a netip.Addr) bool {
	for _, p := range list {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

var cgnat = netip.MustParsePrefix("100.64.0.0/10")
var thisNet = netip.MustParsePrefix("0.0.0.0/8")

// isPrivate reports addresses that on Vercel would be Vercel's own network
// and here are the developer's machine or LAN.
func isPrivate(a netip.Addr) bool {
	a = a.Unmap()
	return a.IsLoopback() || a.IsPrivate() || a.IsLinkLocalUnicast() || a.IsLinkLocalMulticast() ||
		a.IsInterfaceLocalMulticast() || a.IsUnspecified() || a.IsMulticast() ||
		cgnat.Contains(a) || thisNet.Contains(a)
}

// dial connects to an address decide chose.
func (p *Proxy) dial(ctx context.Context, addr string) (net.Conn, error) {
	d := net.Dialer{Timeout: p.opts.DialTimeout}
	return d.DialContext(ctx, "tcp", addr)
}
