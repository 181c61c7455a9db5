//go:build !linux

package sandboxruntime

import (
	"context"
	"errors"
	"net"
)

// errNetNSLinux: network namespaces are a Linux feature.
var errNetNSLinux = errors.New("network namespaces need Linux")

// NetNS is never created outside Linux (probeNetNS fails).
type NetNS struct{}

func newNetNS() (*NetNS, error) { return nil, errNetNSLinux }

func probeNetNS() error { return errNetNSLinux }

func (*NetNS) enter() error { return errNetNSLinux }

// Listen fails: there is no namespace outside Linux.
func (*NetNS) Listen(string, string) (net.Listener, error) { return nil, errNetNSLinux }

// DialContext fails: there is no namespace outside Linux.
func (*NetNS) DialContext(context.Context, string, string) (net.Conn, error) {
	return nil, errNetNSLinux
}

// Close does nothing.
func (*NetNS) Close() error { return nil }
