package sandboxclient_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// TestClientModuleHoldsNoTooling is the proof of ADR 0008 (one Go module):
// a program that imports the client packages gets, in its go.mod and
// go.sum, the modules those packages need and none of the operator's
// tooling (test frameworks, the image builder, the CLI framework), because
// Go prunes the module graph of a dependency to what its imported packages
// need. If a client package starts importing tooling, this fails, and the
// module split the ADR rejected is back on the table.
func TestClientModuleHoldsNoTooling(t *testing.T) {
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..")
	dir := t.TempDir()
	write := func(name, body string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", "module example.com/client\n\ngo 1.26\n\nrequire github.com/getsentry/sandbox-controller v0.0.0\n\nreplace github.com/getsentry/sandbox-controller => "+root+"\n")
	write("main.go", `package main

import (
	_ "github.com/getsentry/sandbox-controller/api/v1alpha1"
	_ "github.com/getsentry/sandbox-controller/pkg/client/clientset/versioned"
	_ "github.com/getsentry/sandbox-controller/pkg/dataplane"
	_ "github.com/getsentry/sandbox-controller/pkg/sandboxclient"
)

func main() {}
`)
	tidy := exec.Command("go", "mod", "tidy")
	tidy.Dir = dir
	// Every module a client builds is one the operator builds, so the
	// module cache has them; tidy may fetch a go.mod or a test dependency
	// of client-go through the module proxy CI reaches.
	tidy.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
	if out, err := tidy.CombinedOutput(); err != nil {
		t.Fatalf("go mod tidy of a client module: %v\n%s", err, out)
	}
	sum, err := os.ReadFile(filepath.Join(dir, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	// A go.sum line "<module> <version> h1:" is a module whose code the
	// client builds; "<module> <version>/go.mod h1:" only a go.mod read to
	// resolve versions. (goleak is listed with code: tidy keeps what the
	// tests of client-go's tools/cache import; it is not ours.)
	var modules, graphOnly []string
	for _, line := range strings.Split(string(sum), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) < 2:
		case !strings.HasSuffix(f[1], "/go.mod"):
			modules = append(modules, f[0])
		case !slices.Contains(graphOnly, f[0]):
			graphOnly = append(graphOnly, f[0])
		}
	}
	t.Logf("a client of api/, pkg/client, pkg/dataplane and pkg/sandboxclient builds %d modules; go.sum names %d (go.mod files read: %d)",
		len(modules), len(slices.Compact(slices.Sorted(slices.Values(append(graphOnly, modules...))))), len(graphOnly))
	for _, m := range modules {
		for _, tooling := range []string{"github.com/onsi/", "github.com/google/go-containerregistry", "github.com/moby/",
			"github.com/spf13/cobra", "sigs.k8s.io/controller-tools", "k8s.io/cli-runtime"} {
			if strings.HasPrefix(m, tooling) {
				t.Errorf("a client's go.sum holds %s (operator tooling)", m)
			}
		}
	}
	if len(modules) == 0 {
		t.Fatal("a client's go.sum is empty: the test did not resolve the client packages")
	}
}
