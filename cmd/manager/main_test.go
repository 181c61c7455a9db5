package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestMain lets a test re-run this binary as the manager itself.
func TestMain(m *testing.M) {
	if os.Getenv("RUN_MANAGER_MAIN") == "1" {
		main()
		return
	}
	os.Exit(m.Run())
}

func TestRefusesToStartWithoutCredentials(t *testing.T) {
	cmd := exec.Command(os.Args[0], "--metrics-bind-address=0", "--health-probe-bind-address=0")
	cmd.Env = append(filteredEnv("VERCEL_TOKEN"), "RUN_MANAGER_MAIN=1")
	out, err := cmd.CombinedOutput()
	exitErr, ok := err.(*exec.ExitError)
	if !ok || exitErr.ExitCode() != 2 {
		t.Fatalf("manager without credentials: err = %v, want exit code 2; output:\n%s", err, out)
	}
	if !strings.Contains(string(out), "no Vercel credentials: set VERCEL_TOKEN or --vercel-token-file") {
		t.Errorf("message does not say what is missing:\n%s", out)
	}
}

func TestReadToken(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "token")
	if err := os.WriteFile(good, []byte("tok_from_file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("VERCEL_TOKEN", "tok_from_env")
	if got, err := readToken(good); err != nil || got != "tok_from_file" {
		t.Errorf("readToken(file) = %q, %v", got, err)
	}
	if got, err := readToken(""); err != nil || got != "tok_from_env" {
		t.Errorf("readToken(env) = %q, %v", got, err)
	}
	if _, err := readToken(empty); err == nil || !strings.Contains(err.Error(), "is empty") {
		t.Errorf("readToken(empty file) error = %v", err)
	}
	if _, err := readToken(filepath.Join(dir, "missing")); err == nil {
		t.Error("readToken(missing file) succeeded")
	}
}

func filteredEnv(drop string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, drop+"=") {
			env = append(env, kv)
		}
	}
	return env
}
