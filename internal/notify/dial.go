package notify

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"syscall"
	"time"
)

// Whoever may write a namespace's sandbox-notifications ConfigMap chooses
// where the manager posts. Without a check that is a blind SSRF: the manager
// would post to its own loopback, the node's link-local metadata service or
// any cluster-internal service it can reach. So the notifier refuses every
// address that is not public unicast, unless the operator allowed it
// (AllowList, --notify-allow-destinations).
//
// The check runs when the connection is made, on the address actually
// dialled (net.Dialer.Control), so a name that resolves to a public address
// when checked and to an internal one when used (DNS rebinding) is refused
// too; the transport uses no proxy, so the address dialled is the receiver's.

// AllowList is the operator's list of internal destinations receivers may
// use: address ranges, and host names whose every address is allowed. The
// zero value allows none.
type AllowList struct {
	prefixes []netip.Prefix
	// hosts are lower-case names without a trailing dot; "*.example.com"
	// allows every name under example.com (not example.com itself).
	hosts []string
}

// ParseAllowList reads entries as --notify-allow-destinations takes them:
// CIDRs ("10.0.0.0/8", "fd00::/8"), single addresses ("10.1.2.3"), host
// names ("receiver.team-a.svc.cluster.local") and wildcard names
// ("*.svc.cluster.local"). Empty entries are ignored.
func ParseAllowList(entries []string) (AllowList, error) {
	var a AllowList
	for _, e := range entries {
		e = strings.TrimSpace(e)
		switch {
		case e == "":
		case strings.Contains(e, "/"):
			p, err := netip.ParsePrefix(e)
			if err != nil {
				return AllowList{}, fmt.Errorf("allowed destination %q: not a CIDR", e)
			}
			a.prefixes = append(a.prefixes, p.Masked())
		default:
			if ip, err := netip.ParseAddr(e); err == nil {
				ip = ip.Unmap()
				a.prefixes = append(a.prefixes, netip.PrefixFrom(ip, ip.BitLen()))
				continue
			}
			h := strings.TrimSuffix(strings.ToLower(e), ".")
			if !validHostPattern(h) {
				return AllowList{}, fmt.Errorf("allowed destination %q: not a CIDR, an IP address or a host name", e)
			}
			a.hosts = append(a.hosts, h)
		}
	}
	return a, nil
}

// validHostPattern accepts a DNS name, optionally starting with "*.".
func validHostPattern(h string) bool {
	h = strings.TrimPrefix(h, "*.")
	if h == "" || len(h) > 253 {
		return false
	}
	for _, label := range strings.Split(h, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for _, c := range label {
			if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '-' && c != '_' {
				return false
			}
		}
	}
	return true
}

// String lists the entries, for the manager's start-up log.
func (a AllowList) String() string {
	var out []string
	for _, p := range a.prefixes {
		out = append(out, p.String())
	}
	return strings.Join(append(out, a.hosts...), ",")
}

// allowsHost reports whether host (a URL's host name) is allowed by name.
func (a AllowList) allowsHost(host string) bool {
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	for _, h := range a.hosts {
		if h == host || (strings.HasPrefix(h, "*.") && strings.HasSuffix(host, h[1:])) {
			return true
		}
	}
	return false
}

// allowsAddr reports whether ip is in an allowed range.
func (a AllowList) allowsAddr(ip netip.Addr) bool {
	for _, p := range a.prefixes {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

// Ranges that are not public unicast, besides what netip classifies.
var (
	thisNetwork  = netip.MustParsePrefix("0.0.0.0/8")
	cgnat        = netip.MustParsePrefix("100.64.0.0/10")
	ietfProtocol = netip.MustParsePrefix("192.0.0.0/24")
	benchmarking = netip.MustParsePrefix("198.18.0.0/15")
	reserved4    = netip.MustParsePrefix("240.0.0.0/4") // and the broadcast address
	v4Compatible = netip.MustParsePrefix("::/96")
	siteLocal6   = netip.MustParsePrefix("fec0::/10")
	nat64        = netip.MustParsePrefix("64:ff9b::/96")
)

// internalRange names the range ip belongs to when it is not a public
// unicast address a receiver may have, or returns "".
func internalRange(ip netip.Addr) string {
	ip = ip.Unmap()
	if nat64.Contains(ip) {
		// NAT64 reaches the IPv4 address in the last 32 bits.
		b := ip.As16()
		if r := internalRange(netip.AddrFrom4([4]byte(b[12:]))); r != "" {
			return r + " (through NAT64)"
		}
		return ""
	}
	switch {
	case !ip.IsValid():
		return "invalid"
	case ip.IsUnspecified():
		return "unspecified"
	case ip.IsLoopback():
		return "loopback"
	case ip.IsLinkLocalUnicast():
		return "link-local"
	case ip.IsMulticast():
		return "multicast"
	case ip.IsPrivate():
		return "private"
	case cgnat.Contains(ip):
		return "shared address space (100.64.0.0/10)"
	case thisNetwork.Contains(ip), ietfProtocol.Contains(ip), benchmarking.Contains(ip), reserved4.Contains(ip),
		v4Compatible.Contains(ip), siteLocal6.Contains(ip):
		return "reserved"
	}
	return ""
}

// RefusedError is a connection the notifier did not make: its address is
// internal and not allowed.
type RefusedError struct {
	Addr  netip.Addr
	Range string
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("address %s is %s: receivers must be public unless --notify-allow-destinations allows them", e.Addr, e.Range)
}

// checkAddr refuses the internal addresses allow does not allow.
func (a AllowList) checkAddr(address string) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("refused a connection to %q: not an IP address and port", address)
	}
	// A zone (fe80::1%eth0) would make every range miss it.
	ip := ap.Addr().Unmap().WithZone("")
	if r := internalRange(ip); r != "" && !a.allowsAddr(ip) {
		return &RefusedError{Addr: ip, Range: r}
	}
	return nil
}

// dialContext dials addr ("host:port"), checking each address it connects
// to. A host allowed by name may resolve to any address.
func (a AllowList) dialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	d := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
	if !a.allowsHost(host) {
		d.Control = func(_, address string, _ syscall.RawConn) error { return a.checkAddr(address) }
	}
	return d.DialContext(ctx, network, addr)
}

// newHTTPClient is the notifier's client: every connection checked against
// allow, no proxy (the check must see the receiver's address), and no
// redirect followed — a redirect is an answer that is not 2xx, so the message
// is retried to the configured URL, never sent on somewhere else.
func newHTTPClient(allow AllowList) *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.Proxy = nil
	t.DialContext = allow.dialContext
	return &http.Client{
		Transport:     t,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// refused returns the RefusedError in err's chain, if any.
func refused(err error) *RefusedError {
	var r *RefusedError
	if errors.As(err, &r) {
		return r
	}
	return nil
}
