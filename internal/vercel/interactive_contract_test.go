package vercel_test

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/getsentry/sandbox-controller/internal/vercel"
	"github.com/getsentry/sandbox-controller/localstack/emulator"
)

// lockedBuffer is a bytes.Buffer safe to read while Wait writes it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestContractInteractive: a sandbox created with __interactive reports an
// interactive port; OpenInteractive and DialTerminal run a shell on a terminal
// of the asked size that follows resizes, takes input as typed, and ends
// with the shell's exit code (docs/dev/interactive-sessions.md).
func TestContractInteractive(t *testing.T) {
	env := newPortableContractEnv(t)
	ctx := testCtx(t)
	created := mustCreate(t, env, vercel.CreateSandboxRequest{Name: env.n("term"), Interactive: true})
	if created.Session.InteractivePort == 0 {
		t.Errorf("session of an interactive sandbox: no interactivePort: %+v", created.Session)
	}
	is, err := env.c.OpenInteractive(ctx, created.Session.ID)
	if err != nil {
		t.Fatal(err)
	}
	term, err := vercel.DialTerminal(ctx, is, vercel.TerminalStart{
		Command: "sh", Env: map[string]string{"TERM": "xterm-256color", "PS1": "$ "}, Cols: 90, Rows: 20,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer term.Close()
	var out lockedBuffer
	codec := make(chan int, 1)
	errc := make(chan error, 1)
	go func() {
		code, err := term.Wait(&out)
		codec <- code
		errc <- err
	}()
	waitFor := func(want string) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if strings.Contains(out.String(), want) {
				return
			}
		}
		t.Fatalf("the terminal never showed %q; it showed %q", want, out.String())
	}
	if _, err := term.Write([]byte("stty size; echo user=$(id -un)\r")); err != nil {
		t.Fatal(err)
	}
	waitFor("20 90")
	waitFor("user=")
	if err := term.Resize(133, 41); err != nil {
		t.Fatal(err)
	}
	if _, err := term.Write([]byte("stty size\rexit 9\r")); err != nil {
		t.Fatal(err)
	}
	waitFor("41 133")
	select {
	case code := <-codec:
		if err := <-errc; err != nil || code != 9 {
			t.Errorf("Wait = %d, %v; want exit code 9", code, err)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("the shell did not end after `exit 9`: %q", out.String())
	}
	if _, err := env.c.DeleteSandbox(context.Background(), env.n("term"), true); err != nil {
		t.Errorf("delete: %v", err)
	}
}

// TestDialTerminalKeepsTheTokenOutOfErrors: a refused connection's error
// names the session's URL but not the token.
func TestDialTerminalKeepsTheTokenOutOfErrors(t *testing.T) {
	env := newEmulatorContractEnv(t, emulator.Options{})
	const token = "secret-token-must-not-leak"
	_, err := vercel.DialTerminal(testCtx(t), &vercel.InteractiveSession{URL: "ws" + strings.TrimPrefix(env.emu.URL(), "http") + "/_interactive/sbx_none", Token: token},
		vercel.TerminalStart{Command: "sh"})
	if err == nil {
		t.Fatal("a wrong token connected")
	}
	if strings.Contains(err.Error(), token) {
		t.Errorf("the error shows the token: %v", err)
	}
}
