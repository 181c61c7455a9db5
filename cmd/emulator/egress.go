package main

import (
	"crypto/x509"
	"fmt"
	"net/netip"
	"os"
	"sort"
	"strings"

	"github.com/getsentry/sandbox-controller/localstack/emulator"
)

// egressHostFlag collects --egress-host name=ip:port.
type egressHostFlag map[string]string

func (f egressHostFlag) String() string {
	out := make([]string, 0, len(f))
	for k, v := range f {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return strings.Join(out, ",")
}

func (f egressHostFlag) Set(v string) error {
	name, addr, ok := strings.Cut(v, "=")
	if !ok || name == "" || strings.ContainsAny(name, "/ ") {
		return fmt.Errorf("want name=ip:port, got %q", v)
	}
	if _, err := netip.ParseAddrPort(addr); err != nil {
		return fmt.Errorf("%q: the address must be an IP and port (127.0.0.1:8443), got %q", name, addr)
	}
	f[strings.ToLower(name)] = addr
	return nil
}

// egressOptions builds the emulator's egress options from the flags.
func egressOptions(mode string, hosts egressHostFlag, allowPrivate bool, caFile string) (emulator.EgressOptions, error) {
	o := emulator.EgressOptions{Enforcement: emulator.EgressEnforcement(mode), AllowPrivateDestinations: allowPrivate}
	switch o.Enforcement {
	case emulator.EgressAuto, emulator.EgressOn, emulator.EgressOff:
	default:
		return o, fmt.Errorf("--egress must be on or off (or empty for auto), not %q", mode)
	}
	if len(hosts) > 0 {
		o.Hosts = hosts
	}
	if caFile != "" {
		b, err := os.ReadFile(caFile)
		if err != nil {
			return o, fmt.Errorf("--egress-upstream-ca: %w", err)
		}
		o.UpstreamRoots = x509.NewCertPool()
		if !o.UpstreamRoots.AppendCertsFromPEM(b) {
			return o, fmt.Errorf("--egress-upstream-ca %s: no PEM certificate in it", caFile)
		}
	}
	return o, nil
}
