package sandboxruntime

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// rtTerminalOutput collects what a terminal prints, safe to read while it runs.
type rtTerminalOutput struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	done chan struct{}
}

func rtReadTerminal(term *Terminal) *rtTerminalOutput {
	o := &rtTerminalOutput{done: make(chan struct{})}
	go func() {
		defer close(o.done)
		b := make([]byte, 4096)
		for {
			n, err := term.Read(b)
			o.mu.Lock()
			o.buf.Write(b[:n])
			o.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	return o
}

// waitFor waits until the output contains want.
func (o *rtTerminalOutput) waitFor(t *testing.T, want string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		o.mu.Lock()
		got := o.buf.String()
		o.mu.Unlock()
		if strings.Contains(got, want) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	t.Fatalf("terminal never printed %q; it printed %q", want, o.buf.String())
}

// TestTerminal runs a shell on a pseudo-terminal in every exec mode that runs
// commands: it is a terminal of the size asked for, resizes reach it, input
// reaches it, and its exit code is the command's.
func TestTerminal(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	modes := []Mode{ModeHost}
	if _, err := NewRunner(ModeNamespace, RunnerOptions{}); err == nil {
		modes = append(modes, ModeNamespace)
	}
	for _, mode := range modes {
		t.Run(string(mode), func(t *testing.T) {
			r, err := NewRunner(mode, RunnerOptions{AllowHostRootSudo: mode == ModeHost})
			if err != nil {
				t.Fatal(err)
			}
			f, _ := rtNewFS(t)
			// Non-sudo commands may run as nobody, who must be able to reach the session.
			for d := f.root; d != filepath.Dir(d) && strings.HasPrefix(d, os.TempDir()+"/"); d = filepath.Dir(d) {
				if err := os.Chmod(d, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			script := `test -t 0 && test -t 1 && echo "tty yes"; stty size; read a; stty size; echo "got $a"; exit 7`
			p, term, err := r.StartTerminal(Command{FS: f, Name: "sh", Args: []string{"-c", script}}, WindowSize{Cols: 91, Rows: 17})
			if err != nil {
				t.Fatal(err)
			}
			defer term.Close()
			out := rtReadTerminal(term)
			out.waitFor(t, "tty yes")
			out.waitFor(t, "17 91")
			if err := term.Resize(WindowSize{Cols: 120, Rows: 40}); err != nil {
				t.Fatal(err)
			}
			if _, err := io.WriteString(term, "hello\r"); err != nil {
				t.Fatal(err)
			}
			out.waitFor(t, "40 120")
			out.waitFor(t, "got hello")
			select {
			case <-p.Done():
			case <-time.After(20 * time.Second):
				p.Terminate()
				t.Fatal("the shell did not exit")
			}
			if code, _ := p.ExitCode(); code != 7 {
				t.Errorf("exit code = %d, want 7", code)
			}
			<-out.done // the terminal reports the end once nobody holds it
		})
	}
}

func TestTerminalNoneMode(t *testing.T) {
	r, err := NewRunner(ModeNone, RunnerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := r.StartTerminal(Command{Name: "sh"}, WindowSize{}); !errors.Is(err, ErrNoTerminal) {
		t.Fatalf("StartTerminal in mode none = %v, want ErrNoTerminal", err)
	}
}
