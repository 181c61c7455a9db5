package chart

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/getsentry/sandbox-controller/localstack/managerpod"
)

// notFromValues are manager flags the chart deliberately leaves out.
var notFromValues = map[string]string{
	"kubeconfig": "in a pod the manager uses its ServiceAccount (in-cluster config)",
	"version":    "prints the version and exits",
}

// TestEveryManagerFlagReachable: each flag of the real manager binary
// (`manager --help`) is set by the chart when every value is set — without
// extraArgs — so a flag added to cmd/manager and not to the chart fails here.
// The rendered arguments, defaults and all-on, are then parsed by the manager
// itself: a misspelt flag or a value of the wrong type fails.
func TestEveryManagerFlagReachable(t *testing.T) {
	manager, err := buildManager()
	if err != nil {
		t.Fatal(err)
	}
	flags := managerFlags(t)

	all := theDeployment(t, render(t, "r", "chart-test", "--values", allOn, "--set", "extraArgs=null"))
	args := all.Spec.Template.Spec.Containers[0].Args
	for name := range flags {
		if why, ok := notFromValues[name]; ok {
			if slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--"+name+"=") }) {
				t.Errorf("the chart passes --%s, which it should not: %s", name, why)
			}
			continue
		}
		if !slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--"+name+"=") }) {
			t.Errorf("manager flag --%s is not reachable from the chart's values (args with every value set: %q): add it to values.yaml, values.schema.json, the args in templates/_helpers.tpl and %s", name, args, allOn)
		}
	}
	checkGracePeriod(t, "all-on", all.Spec.Template.Spec)

	for name, args := range map[string][]string{
		"defaults": theDeployment(t, render(t, "r", "chart-test")).Spec.Template.Spec.Containers[0].Args,
		"all-on":   args,
	} {
		// Flags are parsed in order, so --help is reached only if every
		// argument before it parsed; it then exits 0.
		if out, err := exec.Command(manager, append(slices.Clone(args), "--help")...).CombinedOutput(); err != nil {
			t.Errorf("%s: the manager refuses the chart's arguments %q: %v\n%s", name, args, err, firstLines(string(out), 2))
		}
	}
}

// managerFlags returns each flag of `manager --help` with its default as the
// usage text gives it ("" when it names none).
func managerFlags(t *testing.T) map[string]string {
	t.Helper()
	manager, err := buildManager()
	if err != nil {
		t.Fatal(err)
	}
	help, err := exec.Command(manager, "--help").CombinedOutput()
	if err != nil {
		t.Fatalf("manager --help: %v\n%s", err, help)
	}
	flags := map[string]string{}
	for _, m := range regexp.MustCompile(`(?m)^  -([a-z0-9][a-z0-9-]*)[^\n]*\n((?:    \t[^\n]*\n?)*)`).FindAllStringSubmatch(string(help), -1) {
		def := ""
		if d := regexp.MustCompile(`\(default ([^)]*)\)\s*$`).FindStringSubmatch(m[2]); d != nil {
			def = strings.Trim(d[1], `"`)
		}
		flags[m[1]] = def
	}
	if len(flags) < 20 {
		t.Fatalf("manager --help lists %d flags; the parse is broken:\n%s", len(flags), help)
	}
	return flags
}

// TestValuesDocumentManagerDefaults: where values.yaml names the manager's
// default of a flag ("--poll-interval ... (manager default 1m)"), it is the
// default `manager --help` prints.
func TestValuesDocumentManagerDefaults(t *testing.T) {
	flags := managerFlags(t)
	values, err := os.ReadFile(filepath.Join(root, chartPath, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	claims := regexp.MustCompile(`--([a-z0-9-]+)[^(\n]*\(manager default ([^),;]+)`).FindAllStringSubmatch(string(values), -1)
	if len(claims) < 10 {
		t.Fatalf("found %d documented defaults in values.yaml; the parse is broken", len(claims))
	}
	for _, c := range claims {
		name, documented := c[1], strings.TrimSpace(c[2])
		actual, ok := flags[name]
		if !ok {
			t.Errorf("values.yaml documents --%s, which the manager does not have", name)
			continue
		}
		if actual == "" {
			continue // the manager prints no default (a zero value); nothing to compare
		}
		if !sameDefault(documented, actual) {
			t.Errorf("values.yaml says the manager's default of --%s is %q; manager --help says %q", name, documented, actual)
		}
	}
}

// buildManager builds cmd/manager once per test binary, into a directory
// removed when the tests end.
var buildManager = sync.OnceValues(func() (string, error) { return managerpod.Build(root, buildDir) })

// firstLines returns the first n lines of s: the error before the usage text.
func firstLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[:min(n, len(lines))], "\n")
}
