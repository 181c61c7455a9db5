package sandboxruntime

import (
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// These tests drive what the SDK's createUser, createGroup and asUser run
// (useradd, groupadd, usermod with sudo; `sudo -u USER -- ...` as the
// default user) against a session, and check that the users stay the
// session's: in its later commands and its snapshot, never in the host's /etc.

// rtOwnEtcRunner returns a runner whose sessions have their own /etc, or skips.
func rtOwnEtcRunner(t *testing.T) *Runner {
	t.Helper()
	r := rtUserNSRunner(t)
	if !r.ownEtc {
		t.Skipf("no session /etc: %s", r.ownEtcReason)
	}
	return r
}

// rtSudoAs runs `sudo -u user -- sh -c script` as the default user, as the
// SDK's asUser does.
func rtSudoAs(t *testing.T, r *Runner, f *FS, user, script string) rtResult {
	t.Helper()
	return rtRun(t, r, Command{FS: f, Name: "sudo", Args: []string{"-u", user, "--", "sh", "-c", script}})
}

func TestSessionUsersAndGroups(t *testing.T) {
	r := rtOwnEtcRunner(t)
	hostPasswd, _ := os.ReadFile("/etc/passwd")
	hostGroup, _ := os.ReadFile("/etc/group")
	f, parent := rtNewFS(t)

	// createUser and createGroup, as the SDK runs them.
	for _, c := range [][]string{
		{"useradd", "-m", "-s", "/bin/bash", "alice"},
		{"chown", "alice:vercel-sandbox", "/home/alice"},
		{"chmod", "770", "/home/alice"},
		{"groupadd", "devs"},
		{"mkdir", "-p", "/shared/devs"},
		{"chown", "vercel-sandbox:devs", "/shared/devs"},
		{"chmod", "2770", "/shared/devs"},
		{"usermod", "-aG", "devs", "alice"},
	} {
		if res := rtRun(t, r, Command{FS: f, Name: c[0], Args: c[1:], Sudo: true}); res.code != 0 {
			t.Fatalf("sudo %q = %+v", c, res)
		}
	}
	// useradd refuses a second alice with its code 9 (the SDK's
	// SandboxUserAlreadyExistsError).
	if res := rtRun(t, r, Command{FS: f, Name: "useradd", Args: []string{"-m", "alice"}, Sudo: true}); res.code != 9 {
		t.Errorf("useradd of an existing user = %+v, want exit 9", res)
	}

	// asUser: the default user runs sudo -u alice; the command has alice's
	// ids, groups and home, and may use the group's shared directory.
	res := rtSudoAs(t, r, f, "alice", `id -un; id -gn; id -Gn; echo "$HOME $USER"; pwd; touch /shared/devs/a && stat -c %U:%G /shared/devs/a`)
	want := "alice\nalice\nalice devs\n/home/alice alice\n/vercel/sandbox\nalice:devs\n"
	if res.code != 0 || res.stdout != want {
		t.Fatalf("sudo -u alice = %+v, want stdout %q", res, want)
	}
	// -g, --user=, VAR=value operands, and the default target root.
	if res := rtRun(t, r, Command{FS: f, Name: "sudo", Args: []string{"--user=alice", "-g", "devs", "X=1", "sh", "-c", "id -gn; echo $X"}}); res.stdout != "devs\n1\n" {
		t.Errorf("sudo --user=alice -g devs X=1 = %+v", res)
	}
	if res := rtRun(t, r, Command{FS: f, Name: "sudo", Args: []string{"id", "-un"}}); res.code != 0 || res.stdout != "root\n" {
		t.Errorf("sudo id -un = %+v", res)
	}
	// A user who does not exist: sudo's message and exit code 1.
	if res := rtSudoAs(t, r, f, "bob", "id"); res.code != 1 || !strings.Contains(res.stderr, "unknown user bob") {
		t.Errorf("sudo -u bob = %+v, want exit 1 and \"unknown user bob\"", res)
	}
	// The user's home is alice's alone (770, group vercel-sandbox).
	if res := rtSh(t, r, f, false, "stat -c '%U:%G %a' /home/alice"); res.stdout != "alice:vercel-sandbox 770\n" {
		t.Errorf("/home/alice = %+v", res)
	}

	// The session's account files are the session's: the fs API reads them,
	// and the host's /etc is untouched.
	if b, err := f.ReadFile("/etc/passwd", ""); err != nil || !strings.Contains(string(b), "\nalice:") {
		t.Errorf("fs API /etc/passwd = %q, %v; want alice in it", b, err)
	}
	for name, before := range map[string][]byte{"passwd": hostPasswd, "group": hostGroup} {
		if now, _ := os.ReadFile("/etc/" + name); !reflect.DeepEqual(now, before) {
			t.Errorf("the host's /etc/%s changed", name)
		}
	}

	// A snapshot keeps them: a session restored from it knows alice and devs.
	snap := filepath.Join(parent, "snap")
	if _, err := f.SnapshotTo(snap); err != nil {
		t.Fatal(err)
	}
	g, err := RestoreFS(snap, filepath.Join(parent, "restored"))
	if err != nil {
		t.Fatal(err)
	}
	if res := rtSudoAs(t, r, g, "alice", "id -un; id -Gn"); res.code != 0 || res.stdout != "alice\nalice devs\n" {
		t.Errorf("restored session: sudo -u alice = %+v", res)
	}
	// And another fresh session does not.
	h, _ := rtNewFS(t)
	if res := rtSudoAs(t, r, h, "alice", "id"); res.code != 1 {
		t.Errorf("another session knows alice: %+v", res)
	}
}

// TestSessionEtcKeepsHostFiles checks that the sandbox's root, who may now
// create files in /etc, can neither change, move nor unlink the host's
// entries there: a root-only host file moved inside the overlay would be
// copied into the session directory, where the emulator (host root) would
// serve it.
func TestSessionEtcKeepsHostFiles(t *testing.T) {
	r := rtOwnEtcRunner(t)
	f, _ := rtNewFS(t)
	secret := "/etc/rt-users-secret-" + strconv.Itoa(os.Getpid())
	if err := os.WriteFile(secret, []byte("host secret canary 5b1f\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(secret)
	script := `
cat ` + secret + ` && echo READ
mv ` + secret + ` /etc/moved && echo MOVED
ln ` + secret + ` /etc/linked && echo LINKED
rm -f ` + secret + ` && echo REMOVED
echo x >> /etc/hostname && echo APPENDED
chmod 777 /etc && echo CHMODDED
echo mine > /etc/own && cat /etc/own`
	res := rtSh(t, r, f, true, script)
	for _, bad := range []string{"canary", "READ", "MOVED", "LINKED", "REMOVED", "APPENDED", "CHMODDED"} {
		if strings.Contains(res.stdout, bad) {
			t.Errorf("sudo got past the host's /etc (%s): %+v", bad, res)
		}
	}
	if !strings.HasSuffix(res.stdout, "mine\n") {
		t.Errorf("sudo could not create its own file in /etc: %+v", res)
	}
	entries, _ := os.ReadDir(filepath.Join(f.root, "etc"))
	for _, e := range entries {
		b, _ := os.ReadFile(filepath.Join(f.root, "etc", e.Name()))
		if strings.Contains(string(b), "canary") {
			t.Errorf("the host's secret reached the session directory as /etc/%s", e.Name())
		}
	}
	if b, err := os.ReadFile(secret); err != nil || !strings.Contains(string(b), "canary") {
		t.Errorf("the host's file changed: %q, %v", b, err)
	}
}

func TestParseSudo(t *testing.T) {
	for _, c := range []struct {
		args []string
		want sudoRequest
		err  bool
	}{
		{args: []string{"-u", "alice", "--", "bash", "-c", "x"}, want: sudoRequest{user: "alice", name: "bash", args: []string{"-c", "x"}}},
		{args: []string{"-ualice", "-gdevs", "id"}, want: sudoRequest{user: "alice", group: "devs", name: "id", args: []string{}}},
		{args: []string{"--user=a", "--group=g", "-n", "-E", "A=1", "env"}, want: sudoRequest{user: "a", group: "g", keepEnv: true, setEnv: []string{"A=1"}, name: "env", args: []string{}}},
		{args: []string{"--", "-x"}, want: sudoRequest{name: "-x", args: []string{}}},
		{args: []string{"-u"}, err: true},
		{args: []string{"-u", "alice"}, err: true},
		{args: []string{"-i", "id"}, err: true},
		{args: nil, err: true},
	} {
		got, err := parseSudo(c.args)
		if (err != nil) != c.err {
			t.Errorf("parseSudo(%q) error = %v, want error %v", c.args, err, c.err)
			continue
		}
		if !c.err && !reflect.DeepEqual(got, c.want) {
			t.Errorf("parseSudo(%q) = %+v, want %+v", c.args, got, c.want)
		}
	}
}

// TestSudoWithoutUserNamespace: in host mode only root and the sandbox user
// exist; sudo -u root is refused as sudo: true is, other users are an error.
func TestSudoWithoutUserNamespace(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	r, err := NewRunner(ModeHost, RunnerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	f, _ := rtNewFS(t)
	if _, err := r.Start(Command{FS: f, Name: "sudo", Args: []string{"-u", "root", "id"}}); err != ErrSudoRefused {
		t.Errorf("sudo -u root in host mode: %v, want ErrSudoRefused", err)
	}
	if res := rtRun(t, r, Command{FS: f, Name: "sudo", Args: []string{"-u", "alice", "id"}}); res.code != 1 || !strings.Contains(res.stderr, "not as alice") {
		t.Errorf("sudo -u alice in host mode = %+v", res)
	}
}
