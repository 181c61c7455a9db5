//go:build linux

package sandboxruntime

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
)

// This file gives each session an /etc of its own where commands get user
// namespaces, so that the SDK's createUser and createGroup (useradd,
// groupadd, usermod, gpasswd run with sudo) work and what they write stays
// with the session, its later commands and its snapshots.
//
// The sandbox's /etc is an overlay: the host's /etc below (never written),
// the session's <root>/etc above. The session's account files (passwd,
// group, shadow, gshadow, and subuid/subgid where the host has them) are
// seeded into <root>/etc on the first command, owned by the sandbox's root,
// so sudo can lock and replace them; everything else is the host's file,
// still owned by an id the command's user namespace does not map, so the
// sandbox's root can read what the host lets everyone read and write none of
// it.
//
// <root>/etc itself is owned by the host's root, group the sandbox's root,
// mode 1775: the sandbox's root may create files there (lock files, passwd+),
// but the sticky bit keeps it from renaming or deleting the host's entries.
// A rename would copy a host file into the session directory, where the
// emulator (host root) would serve it through the fs API and snapshots: a
// root-only host file would leak. Hard links are refused by the kernel's
// protected_hardlinks (a file the sandbox does not own).

// overlayOptions are the overlay's mount options. index=off: commands of a
// session mount the same upper at once (each in its own mount namespace);
// metacopy=off and redirect_dir=off: what is copied up is a plain file or
// directory, which a snapshot (a plain copy of the session) keeps whole.
const overlayOptions = "index=off,metacopy=off,redirect_dir=off"

// etcSeedMode is the mode of each account file seeded into a session.
var etcSeedMode = map[string]os.FileMode{"passwd": 0o644, "group": 0o644, "shadow": 0o600, "gshadow": 0o600,
	"subuid": 0o644, "subgid": 0o644, ".pwd.lock": 0o600}

// seedSessionEtc makes <root>/etc the overlay's upper (owner and mode as the
// file comment says) and seeds the account files it lacks. It runs as the
// emulator (host root), before the command's thread enters the sandbox.
// errEtcReplaced: the session has no /etc directory to make its own.
func seedSessionEtc(root string) error {
	upper := filepath.Join(root, "etc")
	fi, err := os.Lstat(upper)
	if errors.Is(err, fs.ErrNotExist) {
		err = os.Mkdir(upper, 0o755)
		if err == nil || errors.Is(err, fs.ErrExist) {
			fi, err = os.Lstat(upper)
		}
	}
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return errEtcReplaced
	}
	if err := os.Lchown(upper, 0, sandboxIDBase); err != nil {
		return err
	}
	if err := os.Chmod(upper, 0o775|os.ModeSticky); err != nil {
		return err
	}
	if err := seedAccountFiles(upper); err != nil {
		return fmt.Errorf("seed the session's account files: %w", err)
	}
	return nil
}

// newEtcWorkdir returns a new, empty work directory for one command's
// overlay, beside the session directory (same filesystem, outside the
// sandbox). Each command has its own: mounting an overlay empties its work
// directory, which would break another command's copy-ups.
func newEtcWorkdir(root string) (string, error) {
	base := root + etcWorkSuffix
	if err := os.Mkdir(base, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", err
	}
	return os.MkdirTemp(base, "cmd-")
}

// seedAccountFiles writes the account files upper lacks: passwd and group as
// sandboxIdentityFiles has them, shadow and gshadow with a locked password
// for each of their entries, subuid and subgid as the host's (they are
// public), each with its "-" backup, and the lock file .pwd.lock: the tools
// lock, back up and replace all of them, and the host's are not the
// sandbox's to replace. An existing entry of any kind (the session's own
// file, a symlink the sandbox put there) is left alone.
func seedAccountFiles(upper string) error {
	ids, err := sandboxIdentityFiles()
	if err != nil {
		return err
	}
	passwd, err := os.ReadFile(filepath.Join(ids, "passwd"))
	if err != nil {
		return err
	}
	group, err := os.ReadFile(filepath.Join(ids, "group"))
	if err != nil {
		return err
	}
	content := map[string][]byte{
		"passwd":  passwd,
		"group":   group,
		"shadow":  lockedEntries(passwd, ":*:19000:0:99999:7:::"),
		"gshadow": lockedEntries(group, ":!::"),
	}
	for _, name := range []string{"subuid", "subgid"} {
		if b, err := os.ReadFile("/etc/" + name); err == nil {
			content[name] = b
		}
	}
	r, err := os.OpenRoot(upper)
	if err != nil {
		return err
	}
	defer r.Close()
	for name, b := range content {
		for _, n := range []string{name, name + "-"} {
			if err := seedFile(r, n, b, etcSeedMode[name]); err != nil {
				return err
			}
		}
	}
	return seedFile(r, ".pwd.lock", nil, etcSeedMode[".pwd.lock"])
}

// seedFile creates name in r with b, owned by the sandbox's root, unless it
// exists (a concurrent command may have seeded it first).
func seedFile(r *os.Root, name string, b []byte, mode os.FileMode) error {
	f, err := r.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return nil
	}
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Chown(sandboxIDBase, sandboxIDBase)
	}
	if err == nil {
		err = f.Chmod(mode)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = r.Remove(name) // a half-written file would be taken as the session's own
	}
	return err
}

// lockedEntries returns one line "name"+suffix for each entry of the
// passwd- or group-format file b.
func lockedEntries(b []byte, suffix string) []byte {
	var out strings.Builder
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	for sc.Scan() {
		name, _, ok := strings.Cut(sc.Text(), ":")
		if ok && name != "" {
			out.WriteString(name + suffix + "\n")
		}
	}
	return []byte(out.String())
}

// mountSessionEtc mounts the overlay of the host's /etc and <root>/etc on
// <root>/etc (the calling thread is in the command's mount namespace, not
// yet pivoted), then mounts again, read-only, what the host has mounted
// below its /etc (a container's resolv.conf, hosts, hostname): an overlay
// shows only the host's /etc directory itself.
func mountSessionEtc(root, work string) error {
	target := filepath.Join(root, "etc")
	opts := "lowerdir=/etc,upperdir=" + target + ",workdir=" + work + "," + overlayOptions
	if err := syscall.Mount("overlay", target, "overlay", syscall.MS_NOSUID|syscall.MS_NODEV, opts); err != nil {
		return fmt.Errorf("mount the session's /etc: %w", err)
	}
	for _, m := range hostEtcSubmounts() {
		dst := filepath.Join(target, strings.TrimPrefix(m, "/etc/"))
		if _, err := os.Lstat(dst); err != nil {
			continue // the overlay has no entry to mount it on
		}
		if err := syscall.Mount(m, dst, "", syscall.MS_BIND|syscall.MS_REC, ""); err != nil {
			return fmt.Errorf("mount the host's %s into the sandbox: %w", m, err)
		}
		_ = syscall.Mount("", dst, "", syscall.MS_REMOUNT|syscall.MS_BIND|syscall.MS_RDONLY|syscall.MS_NOSUID, "")
	}
	return nil
}

// hostEtcSubmounts lists the mount points below the host's /etc, shallowest
// first, as the emulator's own mount namespace has them (read once).
var hostEtcSubmounts = sync.OnceValue(func() []string {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		fields := strings.Fields(line)
		if len(fields) < 5 {
			continue
		}
		mp := unescapeMountPath(fields[4])
		if strings.HasPrefix(mp, "/etc/") {
			out = append(out, mp)
		}
	}
	return out
})

// unescapeMountPath undoes mountinfo's octal escapes (\040 for a space).
func unescapeMountPath(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var v byte
			if _, err := fmt.Sscanf(s[i+1:i+4], "%03o", &v); err == nil {
				b.WriteByte(v)
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// probeEtcOverlay reports whether sessions can get an overlay /etc: it mounts
// one, with overlayOptions, on a throw-away thread and directory.
func probeEtcOverlay() error {
	dir, err := os.MkdirTemp("", "sandbox-etc-probe-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	for _, d := range []string{"lower", "upper", "work", "merged"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
			return err
		}
	}
	err = inThrowAwayMountNamespace(func() error {
		opts := fmt.Sprintf("lowerdir=%s/lower,upperdir=%s/upper,workdir=%s/work,%s", dir, dir, dir, overlayOptions)
		return syscall.Mount("overlay", filepath.Join(dir, "merged"), "overlay", syscall.MS_NOSUID|syscall.MS_NODEV, opts)
	})
	if err != nil {
		return fmt.Errorf("overlay mount: %w", err)
	}
	return nil
}
