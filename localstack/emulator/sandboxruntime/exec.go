package sandboxruntime

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"
)

// This file runs a sandbox's commands as real local processes, in one of three modes:
//
//   - namespace (the default when the emulator runs as root on Linux): each command
//     gets a private mount namespace in which the host's system directories (/usr,
//     /etc, /bin, /lib*, /opt, /run, /sys read-only; /dev; a fresh /proc) are
//     bind-mounted into the session directory, and is then chrooted into it. So the
//     session directory is the command's "/": /vercel/sandbox, /tmp, /home, /root,
//     /var and any other top-level directory a command creates are the session's,
//     and absolute paths behave as in a real sandbox. The namespace is entered by a
//     locked OS thread that then forks the command and waits for it; the thread is
//     discarded afterwards, so the emulator itself never changes its own view and
//     the host never sees a mount. Limits: what the fs API writes under the
//     host-backed directories (say /usr/local/bin/x or /etc/hostname) is stored in
//     the session but hidden from commands by the read-only host directory, and
//     commands see the host's processes. Commands given a NetNS (netns.go) start
//     in their session's network namespace; without one they share the host's
//     network. Each command also gets its
//     own user namespace (when the kernel allows, probed once): the sandbox's
//     root is host uid sandboxIDBase, so a sudo command is root over the
//     session's files but holds no privilege on the host. The command's mount
//     namespace is pivoted into the session, so leaving the chroot leads nowhere.
//   - host (fallback when namespaces are unavailable, e.g. not root): commands run
//     with their cwd mapped into the session directory and HOME/TMPDIR pointing
//     into it, but absolute paths are NOT remapped: `cat /vercel/sandbox/a.txt`
//     looks on the host. Commands can read and write the host like any local process.
//   - none: nothing is executed. Every command exits at once with code 0 (or the
//     code set with SetScriptedExit) and no output. It costs no process, goroutine
//     or file, for load tests with thousands of sandboxes.
//
// Non-sudo commands run as the sandbox user (vercel-sandbox if the host has such a
// user, else nobody) when the emulator is root; otherwise every command runs as the
// emulator's user. A sudo command would be the host's root when the emulator is
// root but cannot give it a user namespace (host mode, or no user namespaces):
// such commands are refused with ErrSudoRefused unless
// RunnerOptions.AllowHostRootSudo says otherwise. A command's process group is
// killed as a whole: on kill, on timeout, on terminate, and when the command's main
// process exits (background jobs it leaves behind are killed then; a process that
// left the group with setsid is not).
//
// RunnerOptions.MaxProcesses bounds each command's processes with RLIMIT_NPROC.
// The kernel counts that limit per user id and user namespace, so it bounds one
// command only where each command has its own user namespace (namespace mode as
// root); elsewhere it would be shared by all commands of the host uid and is not
// applied. The limit is set while the command is stopped by ptrace at its first
// instruction after exec, so not one fork escapes it; processes that detach
// (setsid, a nested user namespace) still count.

// Mode selects how commands run; see the file comment.
type Mode string

const (
	ModeNamespace Mode = "namespace"
	ModeHost      Mode = "host"
	ModeNone      Mode = "none"
)

const (
	// defaultCommandPath is the PATH commands get when their environment has none.
	defaultCommandPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	// outputGrace is how long output may still drain after a command's process
	// group is gone (a daemon that escaped the group may hold its pipes open).
	outputGrace = 250 * time.Millisecond
	// terminateWait bounds how long terminate waits for a killed command to be reaped.
	terminateWait = 10 * time.Second
	// exitKilled is the exit code of a command killed by SIGKILL (timeout, terminate).
	exitKilled = 128 + int(syscall.SIGKILL)
)

// ErrSudoRefused is returned by Start for a sudo command that would run as the
// host's root (see RunnerOptions.AllowHostRootSudo).
var ErrSudoRefused = errors.New("sudo is refused: this emulator runs as root and cannot give commands a user namespace, " +
	"so a sudo command would be root on the host (start the emulator with --allow-host-root-sudo to allow it)")

// RunnerOptions are the choices of a Runner beyond its mode.
type RunnerOptions struct {
	// AllowHostRootSudo lets sudo commands run as the host's root where no
	// user namespace can contain them. Off by default.
	AllowHostRootSudo bool
	// MaxProcesses bounds the processes (and threads) of one command, all
	// its descendants included, however they detach: a fork beyond it fails
	// with EAGAIN. 0 = no bound. It is enforced only where commands get a user
	// namespace (see processLimit); Describe says when it is not.
	MaxProcesses int
}

// Runner starts commands in one exec mode. It is safe for concurrent use.
type Runner struct {
	m      Mode
	reason string // why auto-detection settled on host mode
	// userns: namespace mode gives each command a user namespace.
	userns       bool
	usernsReason string // why not, when root in namespace mode
	// ownEtc: with userns, each session's /etc is its own (etc_linux.go);
	// ownEtcReason says why not.
	ownEtc       bool
	ownEtcReason string
	// sudoRefused: a sudo command would be host root and that was not allowed.
	sudoRefused bool
	// sudoHostRoot: a sudo command is host root (allowed explicitly).
	sudoHostRoot bool
	// netns: each session's commands can get a network namespace of their
	// own (NewNetNS); netnsReason says why not.
	netns       bool
	netnsReason string
	// nproc is the process limit of every command (RunnerOptions.MaxProcesses)
	// when it can be enforced, else 0, with nprocReason saying why not.
	nproc       int
	nprocReason string

	mu       sync.RWMutex
	scripted map[string]int // exec mode none: exit codes by command name
}

// NewRunner returns a runner for mode, which is "namespace", "host", "none", or ""
// to pick namespace when this process can create mount namespaces and chroot
// (probed once, here) and host otherwise. Asking for namespace explicitly when it
// is unavailable is an error. In namespace mode it also probes whether commands
// can get a user namespace.
func NewRunner(mode Mode, opts RunnerOptions) (*Runner, error) {
	var r *Runner
	switch mode {
	case ModeNone, ModeHost:
		r = &Runner{m: mode}
	case ModeNamespace:
		if err := probeNamespace(); err != nil {
			return nil, fmt.Errorf("exec mode namespace is unavailable: %w", err)
		}
		r = &Runner{m: mode}
	case "":
		if err := probeNamespace(); err != nil {
			r = &Runner{m: ModeHost, reason: err.Error()}
		} else {
			r = &Runner{m: ModeNamespace}
		}
	default:
		return nil, fmt.Errorf("unknown exec mode %q (want namespace, host or none)", mode)
	}
	if r.m == ModeNamespace {
		if err := probeUserNamespace(); err != nil {
			r.usernsReason = err.Error()
		} else {
			r.userns = true
			if err := probeEtcOverlay(); err != nil {
				r.ownEtcReason = err.Error()
			} else {
				r.ownEtc = true
			}
		}
	}
	r.probeNetwork()
	if r.m != ModeNone && !r.userns && os.Geteuid() == 0 {
		r.sudoHostRoot = opts.AllowHostRootSudo
		r.sudoRefused = !opts.AllowHostRootSudo
	}
	if opts.MaxProcesses < 0 {
		return nil, fmt.Errorf("the process limit must not be negative (%d)", opts.MaxProcesses)
	}
	if opts.MaxProcesses > 0 && r.m != ModeNone {
		switch {
		case !r.userns:
			// RLIMIT_NPROC counts the processes of a host uid: without a user
			// namespace per command it would be shared by every session's
			// commands (and, not as root, by all of the emulator user's processes).
			r.nprocReason = "commands get no user namespace"
			if r.usernsReason != "" {
				r.nprocReason += " (" + r.usernsReason + ")"
			}
		default:
			if err := probeProcessLimit(); err != nil {
				r.nprocReason = err.Error()
			} else {
				r.nproc = opts.MaxProcesses
			}
		}
	}
	return r, nil
}

// ProcessLimit returns the process limit commands run under, 0 when there
// is none, and why a limit asked for is not enforced.
func (r *Runner) ProcessLimit() (int, string) { return r.nproc, r.nprocReason }

// SandboxUserID is the uid and gid of vercel-sandbox inside a command's user
// namespace, where /etc/passwd names it (sandboxIdentityFiles). Vercel's value
// is not published; one public third-party fixture of a Vercel-style image
// uses 1001 (docs/dev/emulator-gaps.md).
const SandboxUserID = 1001

// sandboxUserNSID is the uid and gid of non-sudo commands inside their user
// namespace (see idMappings).
func sandboxUserNSID() uint32 {
	if sandboxUser().uid <= 0 {
		return 0
	}
	return SandboxUserID
}

// Mode returns the mode commands run in.
func (r *Runner) Mode() Mode { return r.m }

// Describe returns one line for the start-up banner saying how commands run.
func (r *Runner) Describe() string {
	u := sandboxUser()
	who := fmt.Sprintf("non-sudo commands run as %s (uid %d)", u.name, u.uid)
	switch {
	case !chownAllowed():
		who = fmt.Sprintf("all commands run as the emulator's user (uid %d): not root, so no user switching", os.Geteuid())
	case r.userns:
		who = fmt.Sprintf("non-sudo commands run as vercel-sandbox (uid %d in their user namespace, host uid %d, %s)", SandboxUserID, u.uid, u.name)
		who += fmt.Sprintf("; sudo is root in a user namespace, host uid %d (no host privilege)", sandboxIDBase)
		if r.ownEtc {
			who += "; each session's /etc/passwd and /etc/group are its own (useradd and groupadd work)"
		} else {
			who += "; /etc is the host's, read-only: useradd and groupadd fail (" + r.ownEtcReason + ")"
		}
	case r.sudoHostRoot:
		who += "; sudo commands run as HOST ROOT (--allow-host-root-sudo)"
	case r.sudoRefused:
		why := "exec=host"
		if r.usernsReason != "" {
			why = "no user namespaces: " + r.usernsReason
		}
		who += "; sudo commands are refused (" + why + "; --allow-host-root-sudo runs them as host root)"
	}
	switch {
	case r.nproc > 0:
		who += fmt.Sprintf("; at most %d processes per command", r.nproc)
	case r.nprocReason != "":
		who += "; the process limit is NOT enforced: " + r.nprocReason
	}
	who += r.describeNetwork()
	switch r.m {
	case ModeNamespace:
		return "exec=namespace: commands run as local processes chrooted into their session directory " +
			"in a private mount namespace (host /usr, /etc, /bin, /lib read-only); " + who
	case ModeHost:
		why := "requested"
		if r.reason != "" {
			why = "mount namespaces unavailable: " + r.reason
		}
		return "exec=host (" + why + "): commands run as local processes with cwd, HOME and TMPDIR " +
			"mapped into the session directory; absolute paths such as /vercel/sandbox are NOT remapped " +
			"and reach the host filesystem; " + who
	default:
		return "exec=none: commands are not run; each exits at once with code 0 (or its scripted code) and no output"
	}
}

// SetScriptedExit makes commands named name (exactly, or by base name) exit with
// code in exec mode none. Other modes ignore it.
func (r *Runner) SetScriptedExit(name string, code int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.scripted == nil {
		r.scripted = make(map[string]int)
	}
	r.scripted[name] = code
}

// scriptedExit returns the exit code for a command named name in mode none.
func (r *Runner) scriptedExit(name string) int {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if c, ok := r.scripted[name]; ok {
		return c
	}
	return r.scripted[filepath.Base(name)]
}

// Command describes one command to start.
type Command struct {
	FS      *FS // the session; may be nil in ModeNone
	Name    string
	Args    []string
	Cwd     string            // absolute sandbox path; "" = /vercel/sandbox
	Env     map[string]string // already merged (sandbox env overlaid by command env)
	Sudo    bool              // root vs the unprivileged user "vercel-sandbox" (as far as the host allows)
	Timeout time.Duration     // 0 = none; SIGKILL when exceeded
	// OutputBudget is shared by the commands of one session; nil = only the
	// per-command cap.
	OutputBudget *OutputBudget
	// NetNS is the session's network namespace (Runner.NewNetNS), which
	// the command starts in; nil = the host's network.
	NetNS *NetNS
	// CABundle is a host file (WriteCABundle) mounted over the sandbox's
	// system bundle of trusted roots, with SSL_CERT_FILE,
	// NODE_EXTRA_CA_CERTS and REQUESTS_CA_BUNDLE pointing at it; "" = none.
	// Namespace mode only.
	CABundle string

	// account is the session user a `sudo -u` command runs as (sudo.go).
	account *account
}

// Process is a started command.
type Process struct {
	log    *Output
	doneCh chan struct{}

	mu         sync.Mutex
	pid        int  // process (and process group) id; 0 if never started
	reaped     bool // pid may be reused: never signal it again
	exited     bool
	code       int
	terminated bool
	cpu        time.Duration // user+system CPU time reported when reaped (cpu.go)
	timer      *time.Timer
	readers    sync.WaitGroup
	pipes      []*os.File // read ends of stdout and stderr, set before the readers start
}

// closedProcDone is the done channel of every command that never ran.
var closedProcDone = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// finishedProc returns a command that has already exited with code and no output.
func finishedProc(code int) *Process {
	return &Process{log: closedEmptyLog, doneCh: closedProcDone, exited: true, code: code}
}

// Done is closed when the command has exited and all its output is in output().
func (p *Process) Done() <-chan struct{} { return p.doneCh }

// ExitCode returns the exit code once the command has exited: the process's code,
// or 128+signal if a signal ended it (137 after a timeout or terminate).
func (p *Process) ExitCode() (code int, exited bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.code, p.exited
}

// Output returns the command's output log.
func (p *Process) Output() *Output { return p.log }

// Kill sends the POSIX signal number sig to the command's process group; a command
// ended by it exits with 128+sig. sig outside 1..64 is an ErrInvalidInput-class
// request error; a command that has already exited gives os.ErrProcessDone.
func (p *Process) Kill(sig int) error {
	if sig < 1 || sig > 64 {
		return requestErrorf(nil, "invalid signal %d", sig)
	}
	return p.signalGroup(syscall.Signal(sig))
}

// Terminate ends the command because its session stopped: SIGKILL to the process
// group, exit code 137. It waits (at most terminateWait) until the command is
// reaped and its output complete. A finished command is left alone.
func (p *Process) Terminate() {
	p.mu.Lock()
	if !p.exited && p.pid > 0 {
		p.terminated = true
	}
	p.mu.Unlock()
	if p.signalGroup(syscall.SIGKILL) != nil {
		return
	}
	t := time.NewTimer(terminateWait)
	defer t.Stop()
	select {
	case <-p.doneCh:
	case <-t.C:
	}
}

// signalGroup signals the command's whole process group, as long as its leader
// is not reaped (so the group id cannot have been reused).
func (p *Process) signalGroup(sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.pid <= 0 || p.reaped || p.exited {
		return os.ErrProcessDone
	}
	if err := syscall.Kill(-p.pid, sig); err != nil {
		if errors.Is(err, syscall.ESRCH) {
			return os.ErrProcessDone
		}
		return err
	}
	return nil
}

// Start starts a command. Problems with the request (empty name, NUL bytes,
// missing cwd) are ErrInvalidInput errors. A program that cannot be found or
// executed is not an error: the command exits with 127 or 126 and a message on
// stderr, as in a shell. In mode none nothing runs (see SetScriptedExit) and
// spec.FS may be nil: a session that only runs commands needs no directory.
func (r *Runner) Start(spec Command) (*Process, error) { return r.start(spec, nil) }

// start starts a command; tty, when set, is the slave side of the terminal
// the command gets as stdin, stdout and stderr (StartTerminal).
func (r *Runner) start(spec Command, tty *os.File) (*Process, error) {
	if spec.Name == "" {
		return nil, requestErrorf(nil, "command is required")
	}
	if r.m == ModeNone {
		return finishedProc(r.scriptedExit(spec.Name)), nil
	}
	if spec.FS == nil {
		return nil, errors.New("start command: no sandbox filesystem")
	}
	spec, ownEtc, done, err := r.sessionIdentity(spec)
	if done != nil || err != nil {
		return done, err
	}
	if spec.Sudo && r.sudoRefused {
		return nil, ErrSudoRefused
	}
	for _, a := range append([]string{spec.Name}, spec.Args...) {
		if strings.IndexByte(a, 0) >= 0 {
			return nil, requestErrorf(nil, "command and arguments must not contain NUL bytes")
		}
	}
	cwd := sandboxAbs(".", spec.Cwd)

	l := &procLaunch{spec: spec, cwd: cwd, ns: r.m == ModeNamespace, userns: r.userns, tty: tty, nproc: r.nproc}
	home := sandboxUserHome
	if spec.Sudo {
		home = "/root"
	}
	if spec.account != nil {
		home = spec.account.home
	}
	var tmp string
	if !l.ns {
		// Host mode cannot remap absolute paths, so at least point the usual
		// places a command writes to into the session.
		if l.hostCwd, err = spec.FS.hostPath(cwd); err != nil {
			return nil, requestErrorf(err, "cwd %q: %v", cwd, err)
		}
		if fi, err := os.Stat(l.hostCwd); err != nil || !fi.IsDir() {
			return nil, requestErrorf(fs.ErrNotExist, "cwd %q does not exist", cwd)
		}
		home = filepath.Join(spec.FS.root, filepath.FromSlash(home))
		tmp = filepath.Join(spec.FS.root, "tmp")
	}
	env, pathEnv, err := commandEnv(spec.Env, home, tmp)
	if err == nil {
		env, err = r.networkEnv(spec, env)
	}
	if err != nil {
		return nil, err
	}
	l.env, l.pathEnv = env, pathEnv
	switch {
	case l.userns:
		// Ids inside the command's user namespace; the sandbox user's are the
		// same as on the host (see idMappings).
		l.cred = &syscall.Credential{Uid: 0, Gid: 0, Groups: []uint32{}}
		if !spec.Sudo {
			l.cred.Uid, l.cred.Gid = sandboxUserNSID(), sandboxUserNSID()
		}
		if a := spec.account; a != nil {
			l.cred = &syscall.Credential{Uid: a.uid, Gid: a.gid, Groups: a.groups}
		}
	case !spec.Sudo && chownAllowed():
		u := sandboxUser()
		l.cred = &syscall.Credential{Uid: uint32(u.uid), Gid: uint32(u.gid), Groups: []uint32{}}
	}

	if ownEtc {
		if l.etcWork, err = newEtcWorkdir(spec.FS.root); err != nil {
			return nil, err
		}
	}
	p := &Process{log: newOutput(), doneCh: make(chan struct{})}
	p.log.budget = spec.OutputBudget
	started := make(chan error, 1)
	go func() {
		// From another thread: this one's root is the sandbox's.
		defer func() { go removeEtcWorkdir(l.etcWork) }()
		// The thread is never unlocked: in namespace mode it has entered the
		// command's mount namespace and chroot, and the runtime throws it away when
		// this goroutine returns. Holding it until the command exits also keeps
		// Pdeathsig (tied to the forking thread) from firing early.
		runtime.LockOSThread()
		proc, err := l.spawn(p)
		started <- err
		if err == nil && proc != nil {
			p.wait(proc, spec.Timeout)
		}
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	return p, nil
}

// procLaunch is what a starting command needs on its locked thread.
type procLaunch struct {
	spec    Command
	cwd     string // sandbox cwd
	hostCwd string // host mode: cwd on the host
	ns      bool
	userns  bool // ns, and the command gets a user namespace
	env     []string
	pathEnv string
	cred    *syscall.Credential
	tty     *os.File // StartTerminal: the terminal's slave side
	nproc   int      // the command's process limit; 0 = none
	etcWork string   // the work directory of the session /etc overlay; "" = none
}

// spawn starts the process for p on the current (locked) thread. It returns a nil
// process without error when the program could not be executed; p has then already
// finished with 126 or 127.
func (l *procLaunch) spawn(p *Process) (*os.Process, error) {
	devNull, err := os.Open(os.DevNull) // opened before any chroot
	if err != nil {
		return nil, err
	}
	defer devNull.Close()
	var outR, outW, errR, errW *os.File
	closeAll := func() {
		for _, f := range []*os.File{outR, outW, errR, errW} {
			if f != nil {
				f.Close()
			}
		}
	}
	files := []*os.File{l.tty, l.tty, l.tty}
	if l.tty == nil {
		if outR, outW, err = os.Pipe(); err != nil {
			return nil, err
		}
		if errR, errW, err = os.Pipe(); err != nil {
			closeAll()
			return nil, err
		}
		files = []*os.File{devNull, outW, errW}
	}

	dir := l.hostCwd // cwd for relative lookups, as seen from this thread
	if err := l.enter(); err != nil {
		closeAll()
		return nil, err
	}
	if l.ns {
		dir = l.cwd
	}

	prog, err := findProgram(l.spec.Name, l.pathEnv, dir)
	if err != nil {
		closeAll()
		p.finishUnstarted(127, fmt.Sprintf("%s: command not found\n", l.spec.Name))
		return nil, nil
	}
	attr := &os.ProcAttr{
		Env:   l.env,
		Files: files,
		Sys:   newSysProcAttr(l.cred, l.userns),
	}
	if l.tty != nil {
		setTerminalAttr(attr.Sys)
	}
	// The process limit is set while the command is stopped at its first
	// instruction (processLimit), so nothing forks before it holds.
	attr.Sys.Ptrace = l.nproc > 0
	if !l.ns {
		attr.Dir = l.hostCwd
	}
	proc, err := os.StartProcess(prog, append([]string{l.spec.Name}, l.spec.Args...), attr)
	if outW != nil {
		outW.Close()
		errW.Close()
	}
	if err != nil {
		if outR != nil {
			outR.Close()
			errR.Close()
		}
		var errno syscall.Errno
		switch {
		case errors.As(err, &errno) && (errno == syscall.ENOENT || errno == syscall.ENOTDIR):
			p.finishUnstarted(127, fmt.Sprintf("%s: No such file or directory\n", l.spec.Name))
			return nil, nil
		case errors.As(err, &errno) && (errno == syscall.EACCES || errno == syscall.ENOEXEC || errno == syscall.EPERM || errno == syscall.EISDIR):
			msg := fmt.Sprintf("%s: %v\n", l.spec.Name, errno)
			if !l.ns && l.cred != nil && errno == syscall.EACCES {
				msg += fmt.Sprintf("sandbox emulator (exec=host): uid %d may be unable to reach %s; "+
					"make the data directory's parents world-searchable or use sudo\n", l.cred.Uid, l.hostCwd)
			}
			p.finishUnstarted(126, msg)
			return nil, nil
		}
		return nil, fmt.Errorf("start %s: %w", l.spec.Name, err)
	}

	if l.nproc > 0 {
		if err := processLimit(proc.Pid, l.nproc); err != nil {
			_ = syscall.Kill(proc.Pid, syscall.SIGKILL)
			_, _ = proc.Wait()
			if outR != nil {
				outR.Close()
				errR.Close()
			}
			return nil, fmt.Errorf("start %s: set its process limit: %w", l.spec.Name, err)
		}
	}
	p.mu.Lock()
	p.pid = proc.Pid
	p.mu.Unlock()
	if outR != nil {
		p.pipes = []*os.File{outR, errR}
		p.readers.Add(2)
		go p.read("stdout", outR)
		go p.read("stderr", errR)
	}
	return proc, nil
}

// enter moves the calling (locked) thread into the command's namespaces:
// the session's network, then (namespace mode) its mount namespace and root.
// The command is forked from this thread, so it starts in all of them; the
// thread is discarded afterwards.
func (l *procLaunch) enter() error {
	if l.spec.NetNS != nil {
		if err := l.spec.NetNS.enter(); err != nil {
			return err
		}
	}
	if !l.ns {
		return nil
	}
	return enterSandbox(l.spec.FS, l.cwd, l.userns, l.spec.CABundle, l.etcWork)
}

// finishUnstarted ends a command that could not be executed.
func (p *Process) finishUnstarted(code int, msg string) {
	p.log.append("stderr", msg)
	p.log.close()
	p.mu.Lock()
	p.exited, p.code = true, code
	p.mu.Unlock()
	close(p.doneCh)
}

// wait waits for the command to exit, enforcing its timeout, then kills what is
// left of its process group, collects the output and records the exit code.
func (p *Process) wait(proc *os.Process, timeout time.Duration) {
	if timeout > 0 {
		p.mu.Lock()
		// SIGKILL makes the exit code 137 by itself.
		p.timer = time.AfterFunc(timeout, func() { _ = p.signalGroup(syscall.SIGKILL) })
		p.mu.Unlock()
	}

	state, err := waitExited(proc)
	if err == nil && state == nil {
		// The leader is a zombie, so its group id cannot be reused yet: kill what
		// it left running in the background, then reap it.
		_ = p.signalGroup(syscall.SIGKILL)
	}
	p.mu.Lock()
	p.reaped = true
	if p.timer != nil {
		p.timer.Stop()
	}
	p.mu.Unlock()
	if state == nil {
		state, err = proc.Wait()
	}
	code := -1
	if err == nil {
		if ws, ok := state.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			code = 128 + int(ws.Signal())
		} else {
			code = state.ExitCode()
		}
	}

	p.drainOutput()

	p.mu.Lock()
	if p.terminated || code < 0 {
		code = exitKilled
	}
	p.cpu = reapedCPUTime(state)
	p.exited, p.code = true, code
	p.mu.Unlock()
	close(p.doneCh)
}

// drainOutput lets the output readers finish, cutting them off after
// outputGrace (a daemon that escaped the process group may hold the pipes open),
// and closes the log.
func (p *Process) drainOutput() {
	deadline := time.Now().Add(outputGrace)
	for _, f := range p.pipes {
		_ = f.SetReadDeadline(deadline) // fails harmlessly if the reader closed it
	}
	p.readers.Wait()
	p.log.close()
}

// read copies one output pipe into the log until EOF or its read deadline.
func (p *Process) read(stream string, f *os.File) {
	defer p.readers.Done()
	defer f.Close()
	buf := make([]byte, 32<<10)
	var sp utf8Splitter
	for {
		n, err := f.Read(buf)
		if n > 0 {
			p.log.append(stream, sp.push(buf[:n]))
		}
		if err != nil {
			break
		}
	}
	p.log.append(stream, sp.flush())
}

// commandEnv turns env into the command's environment: exactly its variables, plus
// PATH and HOME (and TMPDIR when tmp is set) if missing. It returns the
// environment and the PATH to look the program up in.
func commandEnv(env map[string]string, home, tmp string) ([]string, string, error) {
	keys := make([]string, 0, len(env))
	for k, v := range env {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.IndexByte(v, 0) >= 0 {
			return nil, "", requestErrorf(nil, "invalid environment variable %q", k)
		}
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make([]string, 0, len(keys)+3)
	for _, k := range keys {
		out = append(out, k+"="+env[k])
	}
	pathEnv, ok := env["PATH"]
	if !ok {
		pathEnv = defaultCommandPath
		out = append(out, "PATH="+pathEnv)
	}
	if _, ok := env["HOME"]; !ok {
		out = append(out, "HOME="+home)
	}
	if _, ok := env["TMPDIR"]; !ok && tmp != "" {
		out = append(out, "TMPDIR="+tmp)
	}
	return out, pathEnv, nil
}

// findProgram finds the program name like a shell would: a name with a slash is used
// as is (relative to cwd), otherwise the first executable regular file in a PATH
// directory wins. Relative PATH entries are relative to cwd. File tests go
// through the calling thread's view, which in namespace mode is the sandbox's.
func findProgram(name, pathEnv, cwd string) (string, error) {
	if strings.Contains(name, "/") {
		if !filepath.IsAbs(name) {
			name = filepath.Join(cwd, name)
		}
		return name, nil
	}
	for _, dir := range filepath.SplitList(pathEnv) {
		if dir == "" {
			dir = "."
		}
		p := filepath.Join(dir, name)
		if !filepath.IsAbs(p) {
			p = filepath.Join(cwd, p)
		}
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fs.ErrNotExist
}
