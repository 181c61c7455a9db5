//go:build linux

package sandboxruntime

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"unsafe"
)

// probeNamespace reports whether this process can give a thread its own mount
// namespace, mount in it and chroot: what namespace mode needs. It tries all
// three on a throw-away thread.
func probeNamespace() error {
	if os.Geteuid() != 0 {
		return errors.New("not running as root")
	}
	return inThrowAwayMountNamespace(func() error {
		if err := syscall.Mount("/", "/", "", syscall.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind mount: %w", err)
		}
		if err := syscall.Chroot("/"); err != nil {
			return fmt.Errorf("chroot: %w", err)
		}
		return nil
	})
}

// inThrowAwayMountNamespace runs f on a thread of its own that has just got
// a private mount namespace, and discards the thread afterwards: what f
// mounts (the probes' trial mounts) never reaches the process.
func inThrowAwayMountNamespace(f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the runtime discards the thread
		errc <- func() error {
			if err := syscall.Unshare(syscall.CLONE_NEWNS); err != nil {
				return fmt.Errorf("unshare mount namespace: %w", err)
			}
			if err := syscall.Mount("", "/", "", syscall.MS_REC|syscall.MS_PRIVATE, ""); err != nil {
				return fmt.Errorf("make mounts private: %w", err)
			}
			return f()
		}()
	}()
	return <-errc
}

// probeUserNamespace reports whether commands can get a user namespace with
// the mappings of idMappings: it runs `true` in one.
func probeUserNamespace() error {
	if os.Geteuid() != 0 {
		return errors.New("not running as root")
	}
	prog, err := exec.LookPath("true")
	if err != nil {
		return fmt.Errorf("no `true` program to probe with: %w", err)
	}
	cmd := exec.Command(prog)
	cmd.SysProcAttr = newSysProcAttr(&syscall.Credential{Groups: []uint32{}}, true)
	cmd.SysProcAttr.Pdeathsig = 0
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("user namespace: %w", err)
	}
	// The kernel refuses user namespaces to chrooted processes, so commands
	// need pivot_root (refused, e.g., when the host runs from an initramfs).
	dir, err := os.MkdirTemp("", "sandbox-pivot-probe-")
	if err != nil {
		return err
	}
	defer os.Remove(dir)
	err = inThrowAwayMountNamespace(func() error {
		if err := syscall.Mount(dir, dir, "", syscall.MS_BIND, ""); err != nil {
			return err
		}
		return pivotInto(dir)
	})
	if err != nil {
		return fmt.Errorf("pivot_root: %w", err)
	}
	return nil
}

// idMappings maps the ids 0..65535 of a command's user namespace to the host
// range starting at sandboxIDBase, except SandboxUserID, which maps to own,
// the host id that plays the sandbox user (so files it and the fs API own
// need no translation). own <= 0 (no such host user) maps nothing specially.
func idMappings(own int) []syscall.SysProcIDMap {
	const size = 1 << 16
	if own <= 0 {
		return []syscall.SysProcIDMap{{ContainerID: 0, HostID: sandboxIDBase, Size: size}}
	}
	return []syscall.SysProcIDMap{
		{ContainerID: 0, HostID: sandboxIDBase, Size: SandboxUserID},
		{ContainerID: SandboxUserID, HostID: own, Size: 1},
		{ContainerID: SandboxUserID + 1, HostID: sandboxIDBase + SandboxUserID + 1, Size: size - SandboxUserID - 1},
	}
}

// sandboxIdentityFiles returns a directory holding passwd and group: the
// host's, with vercel-sandbox as SandboxUserID (home /home/vercel-sandbox) in
// place of any entry of that name or id. Namespace mode with user namespaces
// mounts them over the sandbox's /etc/passwd and /etc/group, so that `id`,
// `whoami` and `~` work as on Vercel. Written once per process.
var sandboxIdentityFiles = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "sandbox-emulator-identity-")
	if err != nil {
		return "", err
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return "", err
	}
	shell := "/bin/sh"
	if _, err := os.Stat("/bin/bash"); err == nil {
		shell = "/bin/bash"
	}
	id := strconv.Itoa(SandboxUserID)
	for _, f := range []struct{ name, entry string }{
		{"passwd", "vercel-sandbox:x:" + id + ":" + id + "::" + sandboxUserHome + ":" + shell},
		{"group", "vercel-sandbox:x:" + id + ":"},
	} {
		host, _ := os.ReadFile("/etc/" + f.name)
		var out []string
		for _, line := range strings.Split(strings.TrimRight(string(host), "\n"), "\n") {
			fields := strings.Split(line, ":")
			if line == "" || fields[0] == "vercel-sandbox" || (len(fields) > 2 && fields[2] == id) {
				continue
			}
			out = append(out, line)
		}
		out = append(out, f.entry)
		if err := os.WriteFile(filepath.Join(dir, f.name), []byte(strings.Join(out, "\n")+"\n"), 0o644); err != nil {
			return "", err
		}
	}
	return dir, nil
})

// mountIdentityFiles mounts sandboxIdentityFiles over the sandbox's
// /etc/passwd and /etc/group (root is the session directory, /etc already
// the host's, mounted read-only).
func mountIdentityFiles(root string) error {
	dir, err := sandboxIdentityFiles()
	if err != nil {
		return fmt.Errorf("write the sandbox's passwd and group: %w", err)
	}
	for _, name := range []string{"passwd", "group"} {
		target := filepath.Join(root, "etc", name)
		if fi, err := os.Lstat(target); err != nil || !fi.Mode().IsRegular() {
			continue // a host without the file: nothing to replace
		}
		if err := syscall.Mount(filepath.Join(dir, name), target, "", syscall.MS_BIND, ""); err != nil {
			return fmt.Errorf("mount the sandbox's /etc/%s: %w", name, err)
		}
		_ = syscall.Mount("", target, "", syscall.MS_REMOUNT|syscall.MS_BIND|syscall.MS_RDONLY|syscall.MS_NOSUID, "")
	}
	return nil
}

// mountFileOverrides mounts the files that replace the host's in the
// sandbox's /etc: passwd and group where commands get a user namespace
// (userns: vercel-sandbox has its own uid there) but no session /etc
// (ownEtc, etc_linux.go, which holds its own), and the CA bundle.
func mountFileOverrides(root string, userns, ownEtc bool, caBundle string) error {
	if userns && !ownEtc {
		if err := mountIdentityFiles(root); err != nil {
			return err
		}
	}
	return mountCABundle(root, caBundle)
}

// mountCABundle mounts the host file bundle, read-only, over the sandbox's
// bundle of trusted roots (caBundleTarget; root is the session directory,
// /etc already the host's, mounted read-only).
func mountCABundle(root, bundle string) error {
	target := caBundleTarget()
	if bundle == "" || target == "" {
		return nil
	}
	dst := filepath.Join(root, target)
	if fi, err := os.Lstat(dst); err != nil || !fi.Mode().IsRegular() {
		return nil // the session replaced /etc: nothing to mount over
	}
	if err := syscall.Mount(bundle, dst, "", syscall.MS_BIND, ""); err != nil {
		return fmt.Errorf("mount the sandbox's %s: %w", target, err)
	}
	_ = syscall.Mount("", dst, "", syscall.MS_REMOUNT|syscall.MS_BIND|syscall.MS_RDONLY|syscall.MS_NOSUID, "")
	return nil
}

// hostEntryKind says how a host top-level entry appears in a sandbox.
type hostEntryKind int

const (
	hostSymlink  hostEntryKind = iota // same symlink (merged /usr: /bin -> usr/bin)
	hostReadOnly                      // read-only bind mount of the host directory
	hostWritable                      // writable bind mount (/dev)
	hostProc                          // a fresh proc mount
	hostTmpfs                         // a fresh, empty tmpfs (/run)
)

// hostEntry is a top-level entry of the host's "/" that commands see.
type hostEntry struct {
	name   string
	kind   hostEntryKind
	target string // hostSymlink
}

// hostEntries lists the host's system directories that namespace mode lends to
// every sandbox. Everything else at the top level belongs to the session.
var hostEntries = sync.OnceValue(func() []hostEntry {
	var out []hostEntry
	for _, name := range []string{"usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "etc", "opt", "run", "sys", "dev", "proc"} {
		fi, err := os.Lstat("/" + name)
		if err != nil {
			continue
		}
		e := hostEntry{name: name, kind: hostReadOnly}
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			t, err := os.Readlink("/" + name)
			if err != nil {
				continue
			}
			e.kind, e.target = hostSymlink, t
		case !fi.IsDir():
			continue
		case name == "dev":
			e.kind = hostWritable
		case name == "proc":
			e.kind = hostProc
		case name == "run":
			// The host's /run holds its daemons' Unix sockets, which a
			// read-only mount does not close and a network namespace does
			// not cover: a sandbox gets its own, as a VM has.
			e.kind = hostTmpfs
		}
		out = append(out, e)
	}
	return out
})

// enterSandbox moves the calling thread, which must be locked and never unlocked
// again, into a new private mount namespace in which the host's system
// directories are mounted into the session directory, then makes that directory
// its root and changes to the sandbox directory cwd. Processes the thread starts
// inherit all of it. Mount points missing in the session are created (empty
// directories and the host's /bin-style symlinks); entries the session has
// replaced with something else are left alone and not mounted. A missing cwd is
// an ErrInvalidInput error. needProc: the sandbox's /proc must be a proc mount
// (the user namespace of a command is set up through it).
//
// The root is changed with pivot_root, and the host's tree detached, so that
// a command root in its user namespace (which may chroot) finds no way back
// to the host's files (the kernel also refuses user namespaces to chrooted
// processes). Without a user namespace, where pivot_root is refused, chroot.
//
// caBundle, when set, is mounted over the sandbox's bundle of trusted roots.
// etcWork, when set, is the work directory of the overlay that makes the
// session's /etc its own (etc_linux.go); else /etc is the host's, read-only.
func enterSandbox(f *FS, cwd string, needProc bool, caBundle, etcWork string) error {
	if err := syscall.Unshare(syscall.CLONE_NEWNS); err != nil {
		return fmt.Errorf("unshare mount namespace: %w", err)
	}
	// Nothing mounted from here on may propagate back to the host.
	if err := syscall.Mount("", "/", "", syscall.MS_REC|syscall.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make mounts private: %w", err)
	}
	// The overlay's upper and work directories must be on one mount: the
	// session's, before the root is bound on itself (which takes it along).
	if etcWork != "" {
		if err := mountSessionEtc(f.root, etcWork); err != nil {
			return err
		}
	}
	// pivot_root needs the new root to be a mount point.
	if err := syscall.Mount(f.root, f.root, "", syscall.MS_BIND|syscall.MS_REC, ""); err != nil {
		return fmt.Errorf("bind the sandbox root: %w", err)
	}
	procMounted := false
	for _, e := range hostEntries() {
		target := filepath.Join(f.root, e.name)
		fi, err := os.Lstat(target)
		if errors.Is(err, fs.ErrNotExist) {
			if e.kind == hostSymlink {
				if err := os.Symlink(e.target, target); err != nil && !errors.Is(err, fs.ErrExist) {
					return err
				}
				continue
			}
			if err := os.Mkdir(target, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
				return err
			}
			fi, err = os.Lstat(target)
		}
		if err != nil {
			return err
		}
		if e.kind == hostSymlink || !fi.IsDir() {
			continue
		}
		if e.name == "etc" && etcWork != "" {
			continue // mounted above
		}
		if err := mountHostEntry(e, target); err != nil {
			return fmt.Errorf("mount /%s into the sandbox: %w", e.name, err)
		}
		procMounted = procMounted || e.kind == hostProc
	}
	if needProc && !procMounted {
		return requestErrorf(nil, "the sandbox's /proc is not a directory: commands cannot start")
	}
	if err := mountFileOverrides(f.root, needProc, etcWork != "", caBundle); err != nil {
		return err
	}
	if err := pivotInto(f.root); err != nil {
		if needProc { // a user namespace: chroot would make the kernel refuse it
			return fmt.Errorf("pivot_root into the sandbox: %w", err)
		}
		if err := syscall.Chroot(f.root); err != nil {
			return fmt.Errorf("chroot into the sandbox: %w", err)
		}
	}
	if err := syscall.Chdir(cwd); err != nil {
		return requestErrorf(err, "cwd %q: %v", cwd, err)
	}
	return nil
}

// pivotInto makes dir (a mount point) the root of the calling thread's mount
// namespace and detaches the old root.
func pivotInto(dir string) error {
	if err := syscall.Chdir(dir); err != nil {
		return err
	}
	// pivot_root(".", "."): the old root ends up stacked on the new one, and
	// detaching "." removes it, without a directory to park it in.
	if err := syscall.PivotRoot(".", "."); err != nil {
		return err
	}
	if err := syscall.Unmount(".", syscall.MNT_DETACH); err != nil {
		return fmt.Errorf("detach the host's root: %w", err)
	}
	return syscall.Chdir("/")
}

// mountHostEntry mounts the host's /<e.name> on target as e.kind says.
func mountHostEntry(e hostEntry, target string) error {
	src := "/" + e.name
	switch e.kind {
	case hostProc:
		err := syscall.Mount("proc", target, "proc", syscall.MS_NOSUID|syscall.MS_NODEV|syscall.MS_NOEXEC, "")
		if err == nil {
			return nil
		}
		// A fresh proc can be refused (e.g. in some containers); lend the host's.
		return syscall.Mount(src, target, "", syscall.MS_BIND|syscall.MS_REC, "")
	case hostWritable:
		return syscall.Mount(src, target, "", syscall.MS_BIND|syscall.MS_REC, "")
	case hostTmpfs:
		return syscall.Mount("tmpfs", target, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, "mode=755,size=64m")
	default:
		if err := syscall.Mount(src, target, "", syscall.MS_BIND|syscall.MS_REC, ""); err != nil {
			return err
		}
		// nosuid: a host setuid program (su, sudo, passwd) must not make a
		// sandbox user the host's root.
		return syscall.Mount("", target, "", syscall.MS_REMOUNT|syscall.MS_BIND|syscall.MS_RDONLY|syscall.MS_NOSUID, "")
	}
}

// newSysProcAttr returns the process attributes of a command: its own process
// group, the given credentials, and death with the thread that starts it (which
// lives until the command is reaped). With userns the command starts in a new
// user namespace mapped by idMappings, and cred holds ids inside it.
func newSysProcAttr(cred *syscall.Credential, userns bool) *syscall.SysProcAttr {
	a := &syscall.SysProcAttr{Setpgid: true, Credential: cred, Pdeathsig: syscall.SIGKILL}
	if userns {
		u := sandboxUser()
		a.Cloneflags = syscall.CLONE_NEWUSER
		a.UidMappings = idMappings(u.uid)
		a.GidMappings = idMappings(u.gid)
		// setgroups must be allowed so that the command drops the emulator's
		// supplementary groups (root's) instead of keeping them.
		a.GidMappingsEnableSetgroups = true
	}
	return a
}

// waitExited blocks until proc has exited without reaping it (waitid WNOWAIT), so
// that its process group can still be signalled safely. It returns a nil state:
// the caller reaps with proc.Wait.
func waitExited(proc *os.Process) (*os.ProcessState, error) {
	const pPID = 1     // P_PID
	var info [128]byte // siginfo_t
	for {
		_, _, errno := syscall.Syscall6(syscall.SYS_WAITID, pPID, uintptr(proc.Pid),
			uintptr(unsafe.Pointer(&info[0])), syscall.WEXITED|syscall.WNOWAIT, 0, 0)
		switch errno {
		case 0:
			return nil, nil
		case syscall.EINTR:
			continue
		default:
			return nil, errno
		}
	}
}

// rlimitNPROC is RLIMIT_NPROC: the processes (threads included) a user may
// have. The kernel counts them per user id and user namespace, so for a
// command in its own user namespace it bounds the command's processes
// however they detach (setsid, double fork, a nested user namespace).
const rlimitNPROC = 6

// processLimit gives the command pid, which was started traced
// (SysProcAttr.Ptrace) and so stops at its first instruction after exec, a
// process limit of n, and lets it run. The limit is set before the command
// can fork: there is no window in which a child escapes it. The caller's
// thread must be the one that started pid (its tracer). A command that was
// killed before it stopped is left for its waiter to reap.
func processLimit(pid, n int) error {
	const (
		pPID       = 1          // P_PID
		cldTrapped = 4          // CLD_TRAPPED: a ptrace stop
		wALL       = 0x40000000 // __WALL
	)
	var info [128]byte // siginfo_t; si_code at offset 8
	for {
		_, _, errno := syscall.Syscall6(syscall.SYS_WAITID, pPID, uintptr(pid), uintptr(unsafe.Pointer(&info[0])),
			syscall.WSTOPPED|syscall.WEXITED|syscall.WNOWAIT|wALL, 0, 0)
		if errno == syscall.EINTR {
			continue
		}
		if errno != 0 {
			return fmt.Errorf("wait for the exec stop: %w", errno)
		}
		break
	}
	if code := *(*int32)(unsafe.Pointer(&info[8])); code != cldTrapped {
		return nil // it exited (was killed) before it ran: nothing to limit
	}
	lim := syscall.Rlimit{Cur: uint64(n), Max: uint64(n)}
	if _, _, errno := syscall.RawSyscall6(syscall.SYS_PRLIMIT64, uintptr(pid), rlimitNPROC,
		uintptr(unsafe.Pointer(&lim)), 0, 0, 0); errno != 0 {
		return fmt.Errorf("prlimit RLIMIT_NPROC: %w", errno)
	}
	if err := syscall.PtraceDetach(pid); err != nil {
		return fmt.Errorf("ptrace detach: %w", err)
	}
	return nil
}

// probeProcessLimit reports whether commands can be given a process limit
// as processLimit does: it runs `true` that way, in a user namespace.
func probeProcessLimit() error {
	prog, err := exec.LookPath("true")
	if err != nil {
		return fmt.Errorf("no `true` program to probe with: %w", err)
	}
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the tracer thread is discarded
		errc <- func() error {
			attr := newSysProcAttr(&syscall.Credential{Groups: []uint32{}}, true)
			attr.Ptrace = true
			proc, err := os.StartProcess(prog, []string{"true"}, &os.ProcAttr{Sys: attr})
			if err != nil {
				return fmt.Errorf("start a traced command: %w", err)
			}
			err = processLimit(proc.Pid, 1)
			if err != nil {
				_ = proc.Kill()
			}
			st, werr := proc.Wait()
			if err != nil {
				return err
			}
			if werr != nil || !st.Success() {
				return fmt.Errorf("a command with a process limit failed: %v %v", werr, st)
			}
			return nil
		}()
	}()
	return <-errc
}
