package sandboxruntime

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Network isolation (netns_linux.go). In namespace mode with user namespaces,
// the emulator can give each session a network namespace of its own
// (NewNetNS): a fresh one holds only a loopback interface, so its commands
// reach nothing but the listeners of their own session, among them the one
// the emulator serves its egress proxy on (Listen). The namespace is created
// by the emulator's root in the host's user namespace, which owns it: root in
// a command's user namespace holds no capability over it, so it can neither
// add an interface or a route nor move into another namespace. Where commands
// run without that (exec mode host, or namespace mode without user
// namespaces or network namespaces), they share the host's network: every
// loopback service of the host (the local etcd of `make dev`, the emulator's
// own endpoints) and every address the host reaches is theirs, and no network
// policy is enforced. NetworkIsolation says which applies; Describe prints it.

// ErrNoNetworkIsolation is returned by NewNetNS where commands cannot get a
// network namespace of their own (see NetworkIsolation).
var ErrNoNetworkIsolation = errors.New("commands cannot get a network namespace of their own")

// errNetNSUnusable is Start's answer to a Command with a NetNS that the
// runner cannot put it in.
var errNetNSUnusable = errors.New("start command: a network namespace needs exec mode namespace with user namespaces")

// NetworkIsolation reports whether NewNetNS can isolate the network of a
// session's commands, and, when it cannot, why.
func (r *Runner) NetworkIsolation() (bool, string) { return r.netns, r.netnsReason }

// NewNetNS returns a new network namespace for one session's commands, with
// only its loopback interface, up. Close it when the session ends.
func (r *Runner) NewNetNS() (*NetNS, error) {
	if !r.netns {
		return nil, fmt.Errorf("%w: %s", ErrNoNetworkIsolation, r.netnsReason)
	}
	return newNetNS()
}

// probeNetwork decides whether the runner's commands can be isolated in a
// network namespace: only in namespace mode, only with user namespaces
// (without one, a sudo command would be root over the namespace), and only
// where creating and using one works (probed).
func (r *Runner) probeNetwork() {
	switch {
	case r.m == ModeNone:
		r.netnsReason = "exec=none runs no command"
	case r.m != ModeNamespace:
		r.netnsReason = "exec=host: commands share the host's network"
	case !r.userns:
		r.netnsReason = "commands get no user namespace, so root in one would own its network"
		if r.usernsReason != "" {
			r.netnsReason += " (" + r.usernsReason + ")"
		}
	default:
		if err := probeNetNS(); err != nil {
			r.netnsReason = "network namespaces unavailable: " + err.Error()
		} else {
			r.netns = true
		}
	}
}

// describeNetwork is Describe's clause on the network.
func (r *Runner) describeNetwork() string {
	if r.netns {
		return "; a session's network can be isolated (network namespaces with only loopback)"
	}
	if r.m == ModeNone {
		return ""
	}
	return "; commands share the HOST'S NETWORK (every host loopback service is reachable; network policies are NOT enforced): " + r.netnsReason
}

// caBundleTargets are where Linux distributions keep the system's PEM bundle
// of trusted roots, in the order the first existing one is replaced
// (Debian/Ubuntu/Alpine, Fedora/RHEL, others).
var caBundleTargets = []string{
	"/etc/ssl/certs/ca-certificates.crt",
	"/etc/pki/tls/certs/ca-bundle.crt",
	"/etc/ssl/cert.pem",
}

// caBundleEnv are the variables that point the common TLS stacks at a
// bundle: OpenSSL and Go, Node (added to its own roots), Python requests.
var caBundleEnv = []string{"SSL_CERT_FILE", "NODE_EXTRA_CA_CERTS", "REQUESTS_CA_BUNDLE"}

// WriteCABundle writes into dir a PEM bundle of the host's trusted roots plus
// extraPEM (the egress proxy's CA), for Command.CABundle, and returns its
// path. Nothing in it is secret: it holds certificates only.
func WriteCABundle(dir string, extraPEM []byte) (string, error) {
	var host []byte
	for _, p := range caBundleTargets {
		if b, err := os.ReadFile(p); err == nil {
			host = b
			break
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	out := append([]byte(nil), host...)
	if len(out) > 0 && out[len(out)-1] != '\n' {
		out = append(out, '\n')
	}
	out = append(out, extraPEM...)
	path := filepath.Join(dir, "ca-certificates.crt")
	if err := os.WriteFile(path, out, 0o644); err != nil {
		return "", err
	}
	return path, nil
}

// caBundleTarget returns the sandbox path the bundle is mounted over: the
// first of caBundleTargets that is a regular file on the host (a symlink
// could lead the mount out of the sandbox), "" when there is none.
func caBundleTarget() string {
	for _, p := range caBundleTargets {
		if fi, err := os.Lstat(p); err == nil && fi.Mode().IsRegular() {
			return p
		}
	}
	return ""
}

// networkEnv checks that the runner can put spec in its NetNS and adds the
// CA bundle's variables to env where the bundle is mounted.
func (r *Runner) networkEnv(spec Command, env []string) ([]string, error) {
	if spec.NetNS != nil && !r.netns {
		return nil, errNetNSUnusable
	}
	if r.m != ModeNamespace || spec.CABundle == "" {
		return env, nil
	}
	return withCABundleEnv(env, caBundleTarget()), nil
}

// withCABundleEnv adds the caBundleEnv variables, pointing at target, to a
// command's environment where it does not set them itself.
func withCABundleEnv(env []string, target string) []string {
	if target == "" {
		return env
	}
	for _, k := range caBundleEnv {
		set := false
		for _, kv := range env {
			if strings.HasPrefix(kv, k+"=") {
				set = true
				break
			}
		}
		if !set {
			env = append(env, k+"="+target)
		}
	}
	return env
}
