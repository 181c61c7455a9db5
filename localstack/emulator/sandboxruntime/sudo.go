package sandboxruntime

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// This file is the sandbox's `sudo`. The official SDK (3.5.0) runs a user's
// commands as `sudo -u USER -- bash -c 'cd "$1" ...' bash CWD [env K=V] CMD
// ARGS` from the default user; a Vercel sandbox has a sudo that user may run
// without a password. The emulator cannot lend the host's sudo (the host's
// /usr is mounted nosuid, and its root is not the sandbox's), so a command
// whose program is `sudo` is run by the emulator itself: it parses sudo's
// options, looks the target user up in the session's own /etc/passwd and
// /etc/group (etc_linux.go), and starts the rest of the command line as that
// user, with the runner's existing sudo powers (root inside the command's
// user namespace; see exec.go for when sudo is refused). Only a top-level
// `sudo` is handled: a `sudo` inside a shell script is not (see
// docs/dev/emulator-gaps.md).

// sudoRequest is a parsed sudo command line.
type sudoRequest struct {
	user, group string   // "" = root, the user's primary group
	keepEnv     bool     // -E
	setEnv      []string // VAR=value operands before the command
	name        string
	args        []string
}

// errSudoUsage marks a sudo command line the emulator's sudo cannot run.
var errSudoUsage = errors.New("sudo usage")

// parseSudo parses sudo's arguments: -u USER, -g GROUP (also --user=,
// --group=, -uUSER), the no-op options -n, -H, -S, -k, -E/--preserve-env,
// "--", then VAR=value operands and the command.
func parseSudo(args []string) (sudoRequest, error) {
	var req sudoRequest
	i := 0
	for ; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			i++
			break
		}
		if !strings.HasPrefix(a, "-") || a == "-" {
			break
		}
		n, err := req.option(a, args[i+1:])
		if err != nil {
			return req, err
		}
		i += n
	}
	for ; i < len(args) && strings.Contains(args[i], "=") && !strings.HasPrefix(args[i], "="); i++ {
		req.setEnv = append(req.setEnv, args[i])
	}
	if i >= len(args) {
		return req, fmt.Errorf("%w: sudo: a command is required (usage: sudo [-u user] [-g group] [--] command [args])", errSudoUsage)
	}
	req.name, req.args = args[i], args[i+1:]
	return req, nil
}

// option applies the option a, whose value may be the next argument, and
// returns how many of rest it used.
func (req *sudoRequest) option(a string, rest []string) (int, error) {
	value := func(long, short string) (string, int, bool) {
		switch {
		case strings.HasPrefix(a, long+"="):
			return strings.TrimPrefix(a, long+"="), 0, true
		case a == long || a == short:
			if len(rest) == 0 {
				return "", 0, false
			}
			return rest[0], 1, true
		case strings.HasPrefix(a, short) && !strings.HasPrefix(a, "--"):
			return strings.TrimPrefix(a, short), 0, true
		}
		return "", 0, false
	}
	if v, n, ok := value("--user", "-u"); ok {
		req.user = v
		return n, nil
	}
	if v, n, ok := value("--group", "-g"); ok {
		req.group = v
		return n, nil
	}
	switch a {
	case "-E", "--preserve-env":
		req.keepEnv = true
		return 0, nil
	case "-n", "--non-interactive", "-H", "--set-home", "-S", "--stdin", "-k", "--reset-timestamp":
		return 0, nil
	}
	return 0, fmt.Errorf("%w: sudo: option %s is not supported by the sandbox emulator's sudo (-u, -g, -E, -n, -H, -S, -k and -- are)", errSudoUsage, a)
}

// account is a user of the session as its /etc/passwd and /etc/group name
// it, with ids inside the command's user namespace.
type account struct {
	name   string
	uid    uint32
	gid    uint32
	groups []uint32 // supplementary
	home   string
	shell  string
}

// maxAccountFile bounds what the emulator reads of a session's passwd or group.
const maxAccountFile = 4 << 20

// readAccountFile reads the account file name (passwd, group) the session's
// commands see: the session's own (etc_linux.go) when own, else the one
// mounted over the host's (sandboxIdentityFiles). The session's is read
// through an os.Root, so a symlink the sandbox put there cannot reach a host
// file.
func readAccountFile(root string, own bool, name string) ([]byte, error) {
	var f *os.File
	var err error
	if own {
		var r *os.Root
		if r, err = os.OpenRoot(filepath.Join(root, "etc")); err != nil {
			return nil, err
		}
		defer r.Close()
		f, err = r.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	} else {
		var dir string
		if dir, err = sandboxIdentityFiles(); err != nil {
			return nil, err
		}
		f, err = os.Open(filepath.Join(dir, name))
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("/etc/%s is not a regular file", name)
	}
	return io.ReadAll(io.LimitReader(f, maxAccountFile))
}

// lookupAccount finds user (and group, when set) in the session's account
// files. A missing user or group gives an error with sudo's message.
func lookupAccount(root string, own bool, user, group string) (*account, error) {
	passwd, err := readAccountFile(root, own, "passwd")
	if err != nil {
		return nil, fmt.Errorf("sudo: cannot read /etc/passwd: %w", err)
	}
	groups, err := readAccountFile(root, own, "group")
	if err != nil {
		return nil, fmt.Errorf("sudo: cannot read /etc/group: %w", err)
	}
	var a *account
	eachEntry(passwd, func(f []string) bool {
		if len(f) < 7 || f[0] != user {
			return true
		}
		uid, err1 := parseSandboxID(f[2])
		gid, err2 := parseSandboxID(f[3])
		if err1 == nil && err2 == nil {
			a = &account{name: user, uid: uid, gid: gid, home: f[5], shell: f[6]}
		}
		return false
	})
	if a == nil {
		return nil, fmt.Errorf("%w: sudo: unknown user %s", errSudoUsage, user)
	}
	found := group == ""
	eachEntry(groups, func(f []string) bool {
		if len(f) < 4 {
			return true
		}
		gid, err := parseSandboxID(f[2])
		if err != nil {
			return true
		}
		if f[0] == group && !found {
			a.gid, found = gid, true
		}
		for _, m := range strings.Split(f[3], ",") {
			if m == user {
				a.groups = append(a.groups, gid)
			}
		}
		return true
	})
	if !found {
		return nil, fmt.Errorf("%w: sudo: unknown group %s", errSudoUsage, group)
	}
	return a, nil
}

// eachEntry calls fn with the fields of each line of a passwd- or
// group-format file until fn returns false.
func eachEntry(b []byte, fn func([]string) bool) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 64<<10), maxAccountFile)
	for sc.Scan() {
		if !fn(strings.Split(sc.Text(), ":")) {
			return
		}
	}
}

// parseSandboxID parses a uid or gid a command's user namespace maps
// (0..65535, see idMappings).
func parseSandboxID(s string) (uint32, error) {
	v, err := strconv.ParseUint(s, 10, 32)
	if err != nil || v >= 1<<16 {
		return 0, fmt.Errorf("id %q is outside the sandbox's ids 0..65535", s)
	}
	return uint32(v), nil
}

// sudoEnv is the environment of a sudo'd command: like sudo's env_reset, the
// caller's TERM, LANG and LC_* only, unless keepEnv (-E), then the target's
// HOME, USER, LOGNAME and SHELL, sudo's SUDO_* and the VAR=value operands.
func sudoEnv(env map[string]string, req sudoRequest, a *account, caller string) map[string]string {
	out := map[string]string{}
	for k, v := range env {
		if req.keepEnv || k == "TERM" || k == "LANG" || strings.HasPrefix(k, "LC_") {
			out[k] = v
		}
	}
	if !req.keepEnv {
		out["PATH"] = defaultCommandPath
	}
	out["HOME"], out["USER"], out["LOGNAME"], out["SHELL"] = a.home, a.name, a.name, a.shell
	out["SUDO_USER"], out["SUDO_COMMAND"] = caller, strings.Join(append([]string{req.name}, req.args...), " ")
	for _, kv := range req.setEnv {
		k, v, _ := strings.Cut(kv, "=")
		out[k] = v
	}
	return out
}

// sessionIdentity prepares who spec runs as: the session's own /etc where
// the runner gives sessions one (ownEtc; seeded here, as the emulator), and,
// for a command whose program is sudo, the command sudo would run
// (sudoCommand), or done when sudo answered at once.
func (r *Runner) sessionIdentity(spec Command) (_ Command, ownEtc bool, done *Process, err error) {
	ownEtc = r.userns && r.ownEtc
	if ownEtc {
		if err := seedSessionEtc(spec.FS.root); errors.Is(err, errEtcReplaced) {
			ownEtc = false
		} else if err != nil {
			return spec, false, nil, err
		}
	}
	if spec.Name == "sudo" {
		spec, done, err = r.sudoCommand(spec, ownEtc)
	}
	return spec, ownEtc, done, err
}

// sudoCommand turns spec, a command whose program is sudo, into the command
// sudo would run. ownEtc: the session has its own /etc (etc_linux.go). A
// command line the emulator's sudo cannot run gives a finished Process with
// exit code 1 and sudo's message on stderr, as sudo would.
func (r *Runner) sudoCommand(spec Command, ownEtc bool) (Command, *Process, error) {
	req, err := parseSudo(spec.Args)
	if err != nil {
		return spec, sudoFailed(err), nil
	}
	user := req.user
	if user == "" || user == "#0" {
		user = "root"
	}
	caller := "vercel-sandbox"
	if spec.Sudo {
		caller = "root"
	}
	if !r.userns {
		// Without a user namespace the only identities are the host's: root
		// (which Start refuses or allows as for sudo: true) and the sandbox user.
		if user != "root" && user != "vercel-sandbox" && user != sandboxUser().name {
			return spec, sudoFailed(fmt.Errorf("sudo: the sandbox emulator (exec=%s, no user namespace) runs commands only as root or vercel-sandbox, not as %s", r.m, user)), nil
		}
		if req.group != "" {
			return spec, sudoFailed(fmt.Errorf("sudo: the sandbox emulator (exec=%s, no user namespace) cannot run commands with group %s", r.m, req.group)), nil
		}
		a := &account{name: user, home: sandboxUserHome, shell: "/bin/sh"}
		if user == "root" {
			a.home = "/root"
		}
		spec.Sudo = user == "root"
		spec.Name, spec.Args = req.name, req.args
		spec.Env = sudoEnv(spec.Env, req, a, caller)
		return spec, nil, nil
	}
	a, err := lookupAccount(spec.FS.root, ownEtc, user, req.group)
	if err != nil {
		if errors.Is(err, errSudoUsage) {
			return spec, sudoFailed(err), nil
		}
		return spec, nil, err
	}
	spec.Sudo = a.uid == 0
	spec.Name, spec.Args = req.name, req.args
	spec.Env = sudoEnv(spec.Env, req, a, caller)
	spec.account = a
	return spec, nil, nil
}

// sudoFailed is a command that exited at once with code 1 and err's message
// (without the errSudoUsage marker) on stderr.
func sudoFailed(err error) *Process {
	msg := strings.TrimPrefix(err.Error(), errSudoUsage.Error()+": ")
	p := &Process{log: newOutput(), doneCh: make(chan struct{})}
	p.finishUnstarted(1, msg+"\n")
	return p
}
