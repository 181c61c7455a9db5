package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestDemo runs the demo program end to end, as `make demo` does, and checks
// that every step succeeded and that the README's commands are the ones it
// ran: CI exercises the five-minute tour through this test.
func TestDemo(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := exec.LookPath("kubectl"); err != nil {
		t.Fatalf("kubectl is needed on PATH: %v", err)
	}
	// The README first: a mismatch fails fast, before the environment starts.
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	tour := tourCommands(t, string(readme))

	bin := filepath.Join(t.TempDir(), "demo")
	build := exec.Command("go", "build", "-o", bin, "./hack/demo")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./hack/demo: %v\n%s", err, out)
	}

	start := time.Now()
	var out bytes.Buffer
	demo := exec.Command(bin)
	demo.Dir = root
	demo.Stdout, demo.Stderr = &out, &out
	if err := demo.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- demo.Wait() }()
	var runErr error
	select {
	case runErr = <-exited:
	case <-time.After(8 * time.Minute):
		// Ctrl-C: the demo stops its environment before it exits.
		_ = demo.Process.Signal(syscall.SIGINT)
		select {
		case <-exited:
		case <-time.After(2 * time.Minute):
			_ = demo.Process.Kill()
			<-exited
		}
		t.Fatalf("the demo did not finish within 8 minutes; its output:\n%s", out.String())
	}
	printed := out.String()
	t.Logf("the demo ran in %s", time.Since(start).Round(100*time.Millisecond))
	if runErr != nil {
		var exitErr *exec.ExitError
		if errors.As(runErr, &exitErr) {
			logState(t, printed)
		}
		t.Fatalf("the demo failed (%v); its output:\n%s", runErr, printed)
	}

	// One ✓ line per step, no ✗, no skipped step.
	steps := regexp.MustCompile(`(?m)^✓ (\d+)/(\d+) .*$`).FindAllStringSubmatch(printed, -1)
	if len(steps) == 0 || steps[0][2] != strconv.Itoa(len(steps)) {
		t.Errorf("want a ✓ line for every step, got %d:\n%s", len(steps), printed)
	}
	for _, s := range steps {
		t.Log(s[0])
	}
	if regexp.MustCompile(`(?m)^(✗|- )`).MatchString(printed) {
		t.Errorf("a step failed or was skipped:\n%s", printed)
	}
	for _, want := range []string{"All " + strconv.Itoa(len(steps)) + " steps succeeded", "(Vercel API: 0 sandboxes in the project)", "Stopped; no process left behind."} {
		if !strings.Contains(printed, want) {
			t.Errorf("the demo did not print %q", want)
		}
	}

	// Every command of the README's tour ran verbatim, in the README's order.
	at := 0
	for _, c := range tour {
		i := strings.Index(printed[at:], "$ "+c+"\n")
		if i < 0 {
			t.Errorf("the README's tour command\n  %s\nwas not run by the demo (in this order)", c)
			continue
		}
		at += i + len("$ "+c)
	}
	// The other kubectl commands of the README (those `make dev` prints,
	// run verbatim by hack/dev/dev_test.go) ran here too, maybe with more flags.
	// "Install on a cluster" is for a real cluster: test/e2e runs it.
	local := string(readme)
	if before, rest, ok := strings.Cut(local, "\n## Install on a cluster"); ok {
		local = before
		if _, after, ok := strings.Cut(rest, "\n## "); ok {
			local += "\n## " + after
		}
	}
	for _, c := range bareKubectlCommands(local) {
		if !regexp.MustCompile(`(?m)^\$ ` + regexp.QuoteMeta(c) + `( |,|$)`).MatchString(printed) {
			t.Errorf("the README's command %q was not run by the demo", c)
		}
	}
}

// tourCommands returns the commands of the README's "Five-minute tour"
// section: the lines of its code blocks that start with "$ ", with the body
// of a heredoc up to its terminator.
func tourCommands(t *testing.T, readme string) []string {
	t.Helper()
	_, section, ok := strings.Cut(readme, "\n## Five-minute tour")
	if !ok {
		t.Fatal(`README.md has no "## Five-minute tour" section`)
	}
	if end := strings.Index(section, "\n## "); end >= 0 {
		section = section[:end]
	}
	var cmds []string
	lines := strings.Split(section, "\n")
	for i := 0; i < len(lines); i++ {
		c, ok := strings.CutPrefix(lines[i], "$ ")
		if !ok {
			continue
		}
		if _, term, ok := strings.Cut(c, "<<"); ok {
			term = strings.Trim(strings.TrimSpace(term), `'"`)
			for i++; i < len(lines) && lines[i] != term; i++ {
				c += "\n" + lines[i]
			}
			c += "\n" + term
		}
		cmds = append(cmds, c)
	}
	if len(cmds) < 10 {
		t.Fatalf("found only %d commands in the README's tour: %q", len(cmds), cmds)
	}
	return cmds
}

// bareKubectlCommands returns the README's indented or fenced lines that are
// a kubectl command without a "$ " prompt.
func bareKubectlCommands(readme string) []string {
	var out []string
	for _, m := range regexp.MustCompile(`(?m)^ *(kubectl [^#\n]*?)\s*(#.*)?$`).FindAllStringSubmatch(readme, -1) {
		out = append(out, m[1])
	}
	return out
}

// logState logs the tail of the environment's logs, whose directory a
// failed demo names and keeps.
func logState(t *testing.T, printed string) {
	m := regexp.MustCompile(`Logs of the environment: (\S+)`).FindStringSubmatch(printed)
	if m == nil {
		return
	}
	for _, name := range []string{"manager.log", "dev.log"} {
		if b, err := os.ReadFile(filepath.Join(m[1], name)); err == nil {
			t.Logf("%s (tail):\n%s", name, tail(string(b), 6000))
		}
	}
	_ = os.RemoveAll(m[1])
}
