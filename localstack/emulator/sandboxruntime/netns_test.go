//go:build linux

package sandboxruntime

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// rtNetRunner returns a runner whose sessions get network namespaces, or
// skips where they cannot (not root, no user or network namespaces).
func rtNetRunner(t *testing.T) *Runner {
	t.Helper()
	r := rtUserNSRunner(t)
	if ok, why := r.NetworkIsolation(); !ok {
		t.Skipf("network isolation unavailable: %s", why)
	}
	return r
}

// rtNetNS creates a network namespace closed at the end of the test.
func rtNetNS(t *testing.T, r *Runner) *NetNS {
	t.Helper()
	n, err := r.NewNetNS()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Close() })
	return n
}

// rtCurl fetches url from inside the sandbox (no proxy) and returns what
// it printed and its exit code.
func rtCurl(t *testing.T, r *Runner, f *FS, n *NetNS, url string) rtResult {
	t.Helper()
	return rtRun(t, r, Command{FS: f, NetNS: n, Name: "curl", Args: []string{"-sS", "--noproxy", "*", "--max-time", "5", url}})
}

// TestNetNSIsolatesCommands checks that a command in a session's network
// namespace reaches no listener of the host's loopback (the make-dev hole:
// the local etcd, the emulator), reaches the session's own listeners (Listen),
// and that a server it starts is reached by DialContext, each session on its
// own ports.
func TestNetNSIsolatesCommands(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	r := rtNetRunner(t)
	if _, err := os.Stat("/usr/bin/curl"); err != nil {
		t.Skip("no /usr/bin/curl to probe with")
	}
	host := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "host-loopback-service") }))
	defer host.Close()
	f, _ := rtNewFS(t)

	// The control: without a namespace the host's loopback service answers,
	// so the refusal below is the namespace's doing.
	if res := rtCurl(t, r, f, nil, host.URL); res.code != 0 || res.stdout != "host-loopback-service" {
		t.Fatalf("without a network namespace: %+v, want the host service's answer", res)
	}
	n := rtNetNS(t, r)
	start := time.Now()
	res := rtCurl(t, r, f, n, host.URL)
	if res.code == 0 || strings.Contains(res.stdout, "host-loopback-service") {
		t.Fatalf("a command in the session's network reached the host's loopback service: %+v", res)
	}
	if !strings.Contains(res.stderr, "Couldn't connect") || time.Since(start) > 4*time.Second {
		t.Errorf("want a fast connection refusal, got %+v after %s", res, time.Since(start))
	}

	// A listener the emulator opens inside the namespace is the command's.
	l, err := n.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	inside := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "inside") }), ReadHeaderTimeout: time.Second}
	served := make(chan struct{})
	go func() { defer close(served); _ = inside.Serve(l) }()
	defer func() { _ = inside.Close(); <-served }()
	if res := rtCurl(t, r, f, n, "http://"+l.Addr().String()+"/"); res.code != 0 || res.stdout != "inside" {
		t.Fatalf("a command could not reach its session's listener: %+v", res)
	}
	if c, err := net.DialTimeout("tcp", l.Addr().String(), time.Second); err == nil {
		c.Close()
		t.Errorf("the session's listener %s is reachable from the host's loopback", l.Addr())
	}
}

// TestNetNSSessionsOwnPorts checks that the servers two sessions' commands
// start on the same port are both reached, each by its own DialContext.
func TestNetNSSessionsOwnPorts(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	r := rtNetRunner(t)
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Skip("no /usr/bin/python3 to serve with")
	}
	const port = "18088"
	var procs []*Process
	for _, name := range []string{"one", "two"} {
		f, _ := rtNewFS(t)
		rtWrite(t, f, "/vercel/sandbox/who", name, 0o644)
		n := rtNetNS(t, r)
		p, err := r.Start(Command{FS: f, NetNS: n, Name: "python3", Args: []string{"-m", "http.server", port, "--bind", "127.0.0.1"}})
		if err != nil {
			t.Fatal(err)
		}
		procs = append(procs, p)
		defer p.Terminate()
		if got := rtGetInside(t, n, port); got != name {
			t.Fatalf("session %s's server answered %q", name, got)
		}
	}
	for _, p := range procs {
		if code, exited := p.ExitCode(); exited {
			t.Fatalf("a server exited with %d: the port was taken", code)
		}
	}
}

// rtGetInside fetches /who from port inside n, retrying while the server starts.
func rtGetInside(t *testing.T, n *NetNS, port string) string {
	t.Helper()
	tr := &http.Transport{DialContext: n.DialContext, DisableKeepAlives: true}
	hc := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	deadline := time.Now().Add(20 * time.Second)
	for {
		res, err := hc.Get("http://127.0.0.1:" + port + "/who")
		if err == nil {
			b, _ := io.ReadAll(res.Body)
			res.Body.Close()
			return string(b)
		}
		if time.Now().After(deadline) {
			t.Fatalf("nothing answers on %s inside the session: %v", port, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestNetNSRootCannotReconfigure checks that root in a command's user
// namespace cannot change the session's network: the namespace belongs to
// the host's user namespace.
func TestNetNSRootCannotReconfigure(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	r := rtNetRunner(t)
	if _, err := os.Stat("/usr/sbin/ip"); err != nil {
		t.Skip("no /usr/sbin/ip to try with")
	}
	f, _ := rtNewFS(t)
	n := rtNetNS(t, r)
	res := rtRun(t, r, Command{FS: f, NetNS: n, Sudo: true, Name: "sh", Args: []string{"-c",
		"id -u; /usr/sbin/ip link set lo down && echo LO-DOWN; /usr/sbin/ip link add veth-x type veth peer name veth-y && echo VETH-ADDED; /usr/sbin/ip link show lo"}})
	if !strings.HasPrefix(res.stdout, "0\n") {
		t.Fatalf("the sudo command is not root in its user namespace: %+v", res)
	}
	if strings.Contains(res.stdout, "LO-DOWN") || strings.Contains(res.stdout, "VETH-ADDED") || !strings.Contains(res.stdout, "UP") {
		t.Fatalf("root in the command's user namespace reconfigured the session's network: %+v", res)
	}
}

// TestNetNSCABundle checks that a command sees the bundle of trusted roots
// the emulator gives it, at the system path and through the variables the
// common TLS stacks read.
func TestNetNSCABundle(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	r := rtNetRunner(t)
	target := caBundleTarget()
	if target == "" {
		t.Skip("the host has no system bundle of trusted roots to replace")
	}
	const marker = "-----BEGIN CERTIFICATE-----\nRTEGRESSCAMARKER\n-----END CERTIFICATE-----\n"
	bundle, err := WriteCABundle(t.TempDir(), []byte(marker))
	if err != nil {
		t.Fatal(err)
	}
	f, _ := rtNewFS(t)
	script := fmt.Sprintf("grep -c RTEGRESSCAMARKER %s; echo \"$SSL_CERT_FILE $NODE_EXTRA_CA_CERTS $REQUESTS_CA_BUNDLE\"; head -c 27 %s", target, target)
	res := rtRun(t, r, Command{FS: f, Name: "sh", Args: []string{"-c", script}, CABundle: bundle})
	want := fmt.Sprintf("1\n%s %s %s\n-----BEGIN CERTIFICATE-----", target, target, target)
	if res.code != 0 || res.stdout != want {
		t.Fatalf("command = %+v, want %q (the host's roots, then the extra CA)", res, want)
	}
	hostRoots, _ := os.ReadFile(target)
	if got, _ := os.ReadFile(bundle); !strings.HasPrefix(string(got), string(hostRoots)) {
		t.Errorf("the bundle does not start with the host's roots")
	}
	res = rtRun(t, r, Command{FS: f, Name: "sh", Args: []string{"-c", script}})
	if strings.Contains(res.stdout, target) || strings.HasPrefix(res.stdout, "1\n") {
		t.Errorf("without CABundle the command still sees it: %+v", res)
	}
}

// TestNetNSClose checks that a closed namespace takes no new socket and that
// nothing of it stays in the emulator: no fd, and no process in it once its
// commands ended.
func TestNetNSClose(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	r := rtNetRunner(t)
	fds := rtOpenFDs(t)
	f, _ := rtNewFS(t)
	n, err := r.NewNetNS()
	if err != nil {
		t.Fatal(err)
	}
	res := rtRun(t, r, Command{FS: f, NetNS: n, Name: "readlink", Args: []string{"/proc/self/ns/net"}})
	self, _ := os.Readlink("/proc/self/ns/net")
	id := strings.TrimSpace(res.stdout)
	if res.code != 0 || !strings.HasPrefix(id, "net:[") || id == self {
		t.Fatalf("the command's network namespace is %q, the host's %q", id, self)
	}
	if got := rtHoldersOf(t, id); len(got) == 0 {
		t.Fatalf("the emulator holds no fd of the open namespace %s", id)
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := n.Listen("tcp", "127.0.0.1:0"); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Listen after Close = %v, want net.ErrClosed", err)
	}
	if _, err := n.DialContext(context.Background(), "tcp", "127.0.0.1:1"); !errors.Is(err, net.ErrClosed) {
		t.Errorf("DialContext after Close = %v, want net.ErrClosed", err)
	}
	if got := rtHoldersOf(t, id); len(got) != 0 {
		t.Errorf("namespace %s still held after Close by %v", id, got)
	}
	if now := rtOpenFDs(t); now > fds {
		t.Errorf("%d fds open after Close, %d before", now, fds)
	}
}

// rtHoldersOf lists the processes in network namespace id ("net:[…]") and
// the fds of this process that hold it.
func rtHoldersOf(t *testing.T, id string) []string {
	t.Helper()
	var out []string
	procs, _ := filepath.Glob("/proc/[0-9]*/ns/net")
	for _, p := range procs {
		if l, _ := os.Readlink(p); l == id {
			out = append(out, p)
		}
	}
	fds, _ := filepath.Glob("/proc/self/fd/*")
	for _, p := range fds {
		if l, _ := os.Readlink(p); l == id {
			out = append(out, p)
		}
	}
	return out
}

// TestNetNSHostModeNoIsolation checks that host mode says it cannot isolate
// the network, refuses namespaces, and that Describe says commands share the
// host's network.
func TestNetNSHostModeNoIsolation(t *testing.T) {
	r, err := NewRunner(ModeHost, RunnerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ok, why := r.NetworkIsolation(); ok || !strings.Contains(why, "exec=host") {
		t.Errorf("NetworkIsolation() = %v, %q", ok, why)
	}
	if _, err := r.NewNetNS(); !errors.Is(err, ErrNoNetworkIsolation) {
		t.Errorf("NewNetNS() = %v, want ErrNoNetworkIsolation", err)
	}
	if d := r.Describe(); !strings.Contains(d, "HOST'S NETWORK") || !strings.Contains(d, "NOT enforced") {
		t.Errorf("Describe() = %q", d)
	}
	f, _ := rtNewFS(t)
	if _, err := r.Start(Command{FS: f, Name: "true", NetNS: &NetNS{}}); !errors.Is(err, errNetNSUnusable) {
		t.Errorf("Start with a NetNS in host mode = %v", err)
	}
}

// TestHostUnixSocketsAreNotLent checks that a host daemon's Unix socket under
// /run, which neither a read-only mount nor a network namespace closes, is not
// in a sandbox: its /run is its own and empty, as on a VM.
func TestHostUnixSocketsAreNotLent(t *testing.T) {
	r := rtUserNSRunner(t)
	dir, err := os.MkdirTemp("/run", "sandbox-host-daemon-")
	if err != nil {
		t.Skipf("cannot create a host socket under /run: %v", err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	sock := filepath.Join(dir, "daemon.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	f, _ := rtNewFS(t)
	res := rtRun(t, r, Command{FS: f, Name: "sh", Args: []string{"-c", "ls " + sock + "; echo entries: $(ls -A /run | wc -l)"}})
	if !strings.Contains(res.stderr, "No such file") || strings.TrimSpace(res.stdout) != "entries: 0" {
		t.Fatalf("the sandbox's /run: %+v; want the host's socket absent and /run empty", res)
	}
}
