package emulator

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/getsentry/sandbox-controller/internal/vercel"
)

// runSudo runs `sh -c script` with sudo through the real client and returns
// its stdout, or the error of the run call.
func runSudo(t *testing.T, te *tenv, script string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := vercel.New(vercel.Config{BaseURL: te.srv.URL, Token: te.tok, TeamID: "team_emulator", ProjectID: "prj_emulator", MaxRetries: -1})
	if err != nil {
		t.Fatal(err)
	}
	sb, err := c.CreateSandbox(ctx, vercel.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	cmd, err := c.RunCommand(ctx, sb.Session.ID, vercel.RunCommandRequest{Command: "sh", Args: []string{"-c", script}, Sudo: true})
	if err != nil {
		return "", err
	}
	if _, err := c.GetCommand(ctx, sb.Session.ID, cmd.ID, true); err != nil {
		t.Fatal(err)
	}
	stdout, _, err := c.ReadAllLogs(ctx, sb.Session.ID, cmd.ID)
	if err != nil {
		t.Fatal(err)
	}
	return stdout, nil
}

// TestSudoNeverHostRoot: through the API, a sudo command is root inside the
// sandbox only; where the emulator cannot contain it, it is refused with 403.
func TestSudoNeverHostRoot(t *testing.T) {
	needSh(t)
	if os.Geteuid() != 0 {
		t.Skip("as a non-root emulator, no command can be host root")
	}
	t.Run("namespace", func(t *testing.T) {
		te := newEnv(t, Options{Exec: "namespace", Clock: realClock{}})
		if !strings.Contains(te.e.ExecDescription(), "user namespace") {
			t.Skipf("no user namespaces here: %s", te.e.ExecDescription())
		}
		out, err := runSudo(t, te, "id -u; cat /proc/self/uid_map | head -1")
		if err != nil {
			t.Fatal(err)
		}
		if fields := strings.Fields(out); len(fields) < 3 || fields[0] != "0" || fields[1] != "0" || fields[2] == "0" {
			t.Fatalf("sudo: %q, want uid 0 inside mapped to a host uid other than 0", out)
		}
	})
	t.Run("host", func(t *testing.T) {
		te := newEnv(t, Options{Exec: "host", Clock: realClock{}})
		_, err := runSudo(t, te, "id -u")
		if err == nil || !vercel.IsUnauthorized(err) || !strings.Contains(err.Error(), "allow-host-root-sudo") {
			t.Fatalf("sudo in exec mode host: %v, want 403 naming --allow-host-root-sudo", err)
		}
	})
	t.Run("host allowed", func(t *testing.T) {
		te := newEnv(t, Options{Exec: "host", Clock: realClock{}, AllowHostRootSudo: true})
		if out, err := runSudo(t, te, "id -u"); err != nil || out != "0\n" {
			t.Fatalf("allowed sudo: %q %v", out, err)
		}
	})
}
