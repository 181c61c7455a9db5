package sandboxruntime

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// These tests prove that a sandbox's sudo never holds the host's root: in
// namespace mode it is root inside a user namespace mapped to an unprivileged
// host uid; where that is impossible it is refused unless explicitly allowed.

// rtUserNSRunner returns a namespace-mode runner whose commands get user
// namespaces, or skips.
func rtUserNSRunner(t *testing.T) *Runner {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	r := rtNamespaceRunner(t)
	if !r.userns {
		t.Skipf("user namespaces unavailable: %s", r.usernsReason)
	}
	return r
}

// hostIDs reads the real, effective, saved and filesystem uids (host view) of
// process pid, and its supplementary groups.
func hostIDs(t *testing.T, pid int) (uids, groups string) {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "Uid:"); ok {
			uids = strings.Join(strings.Fields(v), " ")
		}
		if v, ok := strings.CutPrefix(line, "Groups:"); ok {
			groups = strings.Join(strings.Fields(v), " ")
		}
	}
	return uids, groups
}

func TestSudoIsRootOnlyInAUserNamespace(t *testing.T) {
	r := rtUserNSRunner(t)
	if !strings.Contains(r.Describe(), "user namespace") {
		t.Errorf("describe does not say how sudo runs: %q", r.Describe())
	}
	f, parent := rtNewFS(t)

	// Inside, sudo is uid 0 with root's powers over the session's files.
	res := rtSh(t, r, f, true, "id -u; echo r > /root/r; mkdir /data && echo d > /data/d; chown 123:123 /data/d && stat -c %u /data/d")
	if res.code != 0 || res.stdout != "0\n123\n" {
		t.Fatalf("sudo inside = %+v", res)
	}

	// On the host, the same process is the unprivileged sandboxIDBase, with no
	// supplementary groups (not root's).
	p, err := r.Start(Command{FS: f, Name: "sleep", Args: []string{"30"}, Sudo: true})
	if err != nil {
		t.Fatal(err)
	}
	uids, groups := hostIDs(t, p.pid)
	want := strings.Repeat(strconv.Itoa(sandboxIDBase)+" ", 4)
	if uids != strings.TrimSpace(want) || groups != "" {
		t.Errorf("host view of a sudo command: uids %q groups %q, want %q and none", uids, groups, strings.TrimSpace(want))
	}
	p.Terminate()
	// The non-sudo user keeps its own host uid.
	p, err = r.Start(Command{FS: f, Name: "sleep", Args: []string{"30"}})
	if err != nil {
		t.Fatal(err)
	}
	u := strconv.Itoa(sandboxUser().uid)
	if uids, _ := hostIDs(t, p.pid); uids != strings.Join([]string{u, u, u, u}, " ") {
		t.Errorf("host view of a non-sudo command: uids %q, want %s", uids, u)
	}
	p.Terminate()

	// What the host keeps for root stays out of reach of sudo: a root-only
	// host file (bind-mounted /etc is the host's), host root's files through
	// /proc, writable host devices, and the host's tree after leaving the
	// chroot (pivot_root detached it).
	secret := filepath.Join("/etc", "rt-sudo-secret-"+strconv.Itoa(os.Getpid()))
	if err := os.WriteFile(secret, []byte("host secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(secret)
	marker := filepath.Join(parent, "host-marker")
	if err := os.WriteFile(marker, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	script := fmt.Sprintf(`
cat %[1]s && echo READ-SECRET
echo pwned > /proc/1/root/tmp/rt-sudo-pwned && echo WROTE-PROC-ROOT
ls /proc/1/root/ >/dev/null 2>&1 && echo LISTED-PROC-ROOT
%[3]s
echo ok`, secret, marker, chrootEscape(marker))
	res = rtSh(t, r, f, true, script)
	for _, bad := range []string{"host secret", "READ-SECRET", "WROTE-PROC-ROOT", "LISTED-PROC-ROOT", "ESCAPED"} {
		if strings.Contains(res.stdout, bad) {
			t.Errorf("sudo reached the host as root (%s): %+v", bad, res)
		}
	}
	if _, err := exec.LookPath("python3"); err == nil && !strings.Contains(res.stdout, "contained") {
		t.Errorf("the chroot escape attempt did not run: %+v", res)
	}
	if !strings.HasSuffix(res.stdout, "ok\n") {
		t.Errorf("script did not run to the end: %+v", res)
	}
	if _, err := os.Lstat("/tmp/rt-sudo-pwned"); err == nil {
		os.Remove("/tmp/rt-sudo-pwned")
		t.Error("sudo wrote the host's /tmp through /proc/1/root")
	}
}

// chrootEscape is a shell line that tries the classic escape from a chroot
// (chroot into a subdirectory, climb out of it with "..", chroot there) and
// prints ESCAPED if the host file marker is then visible. It needs python3
// from the host's /usr; without it the line does nothing.
func chrootEscape(marker string) string {
	py := `import os
os.makedirs("/x", exist_ok=True)
os.chroot("/x")
for _ in range(64): os.chdir("..")
os.chroot(".")
print("ESCAPED" if os.path.exists(%q) else "contained")`
	return "command -v python3 >/dev/null && python3 -c '" + fmt.Sprintf(py, marker) + "'"
}

func TestSudoRefusedWithoutUserNamespace(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("sudo can only be host root when the emulator is root")
	}
	r, err := NewRunner(ModeHost, RunnerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(r.Describe(), "sudo commands are refused") {
		t.Errorf("describe: %q", r.Describe())
	}
	f, _ := rtNewFS(t)
	// Non-sudo commands run as nobody, who must be able to reach the session.
	for d := f.root; d != filepath.Dir(d) && strings.HasPrefix(d, os.TempDir()+"/"); d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := r.Start(Command{FS: f, Name: "id", Args: []string{"-u"}, Sudo: true}); !errors.Is(err, ErrSudoRefused) {
		t.Fatalf("sudo in host mode as root: %v, want ErrSudoRefused", err)
	}
	// Non-sudo commands still run, unprivileged.
	if res := rtRun(t, r, Command{FS: f, Name: "id", Args: []string{"-u"}}); res.stdout != strconv.Itoa(sandboxUser().uid)+"\n" {
		t.Fatalf("non-sudo in host mode: %+v", res)
	}

	// Explicitly allowed, sudo is host root, and the banner says so.
	r, err = NewRunner(ModeHost, RunnerOptions{AllowHostRootSudo: true})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(r.Describe(), "HOST ROOT") {
		t.Errorf("describe: %q", r.Describe())
	}
	if res := rtRun(t, r, Command{FS: f, Name: "id", Args: []string{"-u"}, Sudo: true}); res.stdout != "0\n" {
		t.Fatalf("allowed sudo: %+v", res)
	}
}
