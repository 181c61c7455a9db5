package main

import (
	"bytes"
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestVersionFlag builds the emulator as make does, with the version set by
// -ldflags, and runs `emulator --version`: it prints the version and exits
// without serving.
func TestVersionFlag(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "emulator")
	const pkg = "github.com/getsentry/sandbox-controller/internal/version"
	build := exec.Command("go", "build", "-ldflags", "-X "+pkg+".version=v9.9.9-test -X "+pkg+".revision=0123456789abcdef", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "--version").CombinedOutput()
	if err != nil {
		t.Fatalf("emulator --version: %v\n%s", err, out)
	}
	if want := "emulator v9.9.9-test (revision 0123456789ab, "; !strings.HasPrefix(string(out), want) {
		t.Errorf("emulator --version = %q, want it to begin with %q", out, want)
	}

	// In process: run returns at once, having printed one line.
	var stdout, stderr bytes.Buffer
	if err := run(context.Background(), []string{"--version"}, &stdout, &stderr, nil); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(stdout.String(), "emulator ") || strings.Count(stdout.String(), "\n") != 1 || stderr.Len() != 0 {
		t.Errorf("run --version printed %q on stdout and %q on stderr, want one version line", stdout.String(), stderr.String())
	}
}
