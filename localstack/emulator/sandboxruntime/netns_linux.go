//go:build linux

package sandboxruntime

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"sync"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A thread's network namespace decides where the sockets it creates live, so
// everything here runs on a locked OS thread: enter the namespace, create the
// socket, return to the emulator's namespace, and unlock only when that
// return worked. A thread that cannot return stays locked, and the runtime
// discards it when its goroutine ends: no other goroutine ever runs in a
// session's network by accident. The invariant this relies on: every thread
// not locked by this package is in the emulator's own network namespace.

// NetNS is one session's network namespace. Its methods are safe for
// concurrent use; after Close, Listen and DialContext fail (sockets and
// processes already in it keep it alive until they end).
type NetNS struct {
	mu sync.RWMutex
	fd int // an open /proc/…/ns/net; -1 once closed
}

// hostNetNS is the emulator's own network namespace, opened once from a
// thread that is in it (any unlocked one).
var hostNetNS = sync.OnceValues(func() (int, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	fd, err := syscall.Open("/proc/thread-self/ns/net", syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("open the emulator's network namespace: %w", err)
	}
	return fd, nil
})

// setns moves the calling thread into the network namespace of fd.
func setns(fd int) error {
	return unix.Setns(fd, unix.CLONE_NEWNET)
}

// newNetNS creates a network namespace with its loopback interface up.
func newNetNS() (*NetNS, error) {
	host, err := hostNetNS()
	if err != nil {
		return nil, err
	}
	type result struct {
		fd  int
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		fd, err := unshareNet()
		if setns(host) == nil {
			runtime.UnlockOSThread()
		} // else: stays locked and the runtime discards the thread
		ch <- result{fd, err}
	}()
	r := <-ch
	if r.err != nil {
		return nil, r.err
	}
	return &NetNS{fd: r.fd}, nil
}

// unshareNet moves the calling (locked) thread into a new network namespace,
// brings its loopback interface up and returns an fd that keeps it.
func unshareNet() (int, error) {
	if err := syscall.Unshare(syscall.CLONE_NEWNET); err != nil {
		return -1, fmt.Errorf("unshare network namespace: %w", err)
	}
	fd, err := syscall.Open("/proc/thread-self/ns/net", syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("open the new network namespace: %w", err)
	}
	if err := loopbackUp(); err != nil {
		syscall.Close(fd)
		return -1, fmt.Errorf("bring up lo: %w", err)
	}
	return fd, nil
}

// loopbackUp sets IFF_UP on the calling thread's loopback interface (the
// kernel then gives it 127.0.0.1/8 and ::1), with the ioctls ifconfig uses.
func loopbackUp() error {
	s, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_DGRAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer syscall.Close(s)
	var req struct { // struct ifreq: the name, then a union whose first member is ifr_flags
		name  [syscall.IFNAMSIZ]byte
		flags uint16
		_     [22]byte
	}
	copy(req.name[:], "lo")
	if _, _, errno := syscall.Syscall(syscall.SYS_IOCTL, uintptr(s), syscall.SIOCGIFFLAGS, uintptr(unsafe.Pointer(&req))); errno != 0 {
		return errno
	}
	req.flags |= syscall.IFF_UP
	if _, _, errno := syscall.Syscall(syscall.SYS_IOCTL, uintptr(s), syscall.SIOCSIFFLAGS, uintptr(unsafe.Pointer(&req))); errno != 0 {
		return errno
	}
	return nil
}

// enter moves the calling thread, which must be locked, into n.
func (n *NetNS) enter() error {
	n.mu.RLock()
	defer n.mu.RUnlock()
	if n.fd < 0 {
		return net.ErrClosed
	}
	if err := setns(n.fd); err != nil {
		return fmt.Errorf("enter the session's network namespace: %w", err)
	}
	return nil
}

// in runs fn on a locked thread inside n, then returns the thread to the
// emulator's namespace (or discards it).
func (n *NetNS) in(fn func()) error {
	host, err := hostNetNS()
	if err != nil {
		return err
	}
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if err := n.enter(); err != nil {
			runtime.UnlockOSThread() // setns failed: the thread did not move
			errc <- err
			return
		}
		fn()
		if setns(host) == nil {
			runtime.UnlockOSThread()
		}
		errc <- nil
	}()
	return <-errc
}

// Listen listens on addr, an IP literal and port, inside n.
func (n *NetNS) Listen(network, addr string) (net.Listener, error) {
	if _, err := netip.ParseAddrPort(addr); err != nil {
		return nil, fmt.Errorf("listen in a session's network: %q is not an IP address and port", addr)
	}
	var (
		l   net.Listener
		err error
	)
	if ierr := n.in(func() { l, err = net.Listen(network, addr) }); ierr != nil {
		return nil, ierr
	}
	return l, err
}

// DialContext connects to addr, an IP literal and port, inside n: a
// loopback address reaches the session's own listeners. Names are refused:
// resolving one could create sockets on other threads, outside n.
func (n *NetNS) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	if _, err := netip.ParseAddrPort(addr); err != nil {
		return nil, fmt.Errorf("dial in a session's network: %q is not an IP address and port", addr)
	}
	var (
		c   net.Conn
		err error
	)
	// FallbackDelay < 0: no parallel dial on another goroutine.
	d := net.Dialer{FallbackDelay: -1}
	if ierr := n.in(func() { c, err = d.DialContext(ctx, network, addr) }); ierr != nil {
		return nil, ierr
	}
	return c, err
}

// Close releases the emulator's hold on n. The namespace disappears once
// the last process and socket in it are gone.
func (n *NetNS) Close() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.fd < 0 {
		return nil
	}
	err := syscall.Close(n.fd)
	n.fd = -1
	return err
}

// probeNetNS creates a network namespace, listens and dials inside it.
func probeNetNS() error {
	n, err := newNetNS()
	if err != nil {
		return err
	}
	defer n.Close()
	l, err := n.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("listen inside: %w", err)
	}
	defer l.Close()
	c, err := n.DialContext(context.Background(), "tcp", l.Addr().String())
	if err != nil {
		return fmt.Errorf("dial inside: %w", err)
	}
	return c.Close()
}
