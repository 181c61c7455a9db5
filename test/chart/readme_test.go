package chart

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestReadmeFlagsTableMatchesManager: the README's "Manager flags" table
// names every flag of the real manager binary (`manager --help`) and no
// other, and where it gives a plain default (a number, a duration, a word or
// a backticked value), it is the one --help prints.
func TestReadmeFlagsTableMatchesManager(t *testing.T) {
	flags := managerFlags(t)
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(readme), "\n### Manager flags\n")
	if !ok {
		t.Fatal(`README.md has no "### Manager flags" section`)
	}
	table, _, _ = strings.Cut(table, "\n## ")
	documented := map[string]bool{}
	rows := 0
	for _, line := range strings.Split(table, "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 4 || !strings.Contains(cells[1], "`--") {
			continue
		}
		rows++
		names := regexp.MustCompile("`--([a-z0-9-]+)`").FindAllStringSubmatch(cells[1], -1)
		defaults := strings.Split(strings.TrimSpace(cells[2]), ", ")
		for i, n := range names {
			name := n[1]
			documented[name] = true
			actual, ok := flags[name]
			if !ok {
				t.Errorf("README documents --%s, which the manager does not have", name)
				continue
			}
			if len(defaults) != len(names) || actual == "" {
				continue // one description for several flags, or no default printed
			}
			if d := strings.Trim(defaults[i], "`"); plainDefault(d) && !sameDefault(d, actual) {
				t.Errorf("README says --%s defaults to %q; manager --help says %q", name, d, actual)
			}
		}
	}
	if rows < 20 {
		t.Fatalf("found %d rows in the README's flags table; the parse is broken", rows)
	}
	for name := range flags {
		if !documented[name] {
			t.Errorf("manager flag --%s is missing from the README's \"Manager flags\" table", name)
		}
	}
}

// plainDefault reports whether a README default cell is a value rather than
// a description such as "(`$VERCEL_TOKEN`)" or "the pod's namespace".
func plainDefault(s string) bool {
	return regexp.MustCompile(`^[A-Za-z0-9:./_-]+$`).MatchString(s) && !strings.Contains(s, " ")
}

func sameDefault(documented, actual string) bool {
	if documented == actual {
		return true
	}
	d1, err1 := time.ParseDuration(documented)
	d2, err2 := time.ParseDuration(actual)
	return err1 == nil && err2 == nil && d1 == d2
}

// TestOneMinimumKubernetesVersion: the README's prerequisites, the chart's
// README and Chart.yaml's kubeVersion state the same minimum Kubernetes
// version.
func TestOneMinimumKubernetesVersion(t *testing.T) {
	read := func(rel string) string {
		b, err := os.ReadFile(filepath.Join(root, rel))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	find := func(rel, re string) string {
		m := regexp.MustCompile(re).FindStringSubmatch(read(rel))
		if m == nil {
			t.Fatalf("%s states no minimum Kubernetes version (want a match of %s)", rel, re)
		}
		return m[1]
	}
	chart := find(filepath.Join(chartPath, "Chart.yaml"), `(?m)^kubeVersion:\s*"?>=\s*v?(1\.\d+)`)
	readme := find("README.md", `Minimum Kubernetes version: \*\*(1\.\d+)\*\*`)
	chartReadme := find(filepath.Join(chartPath, "README.md"), `Minimum Kubernetes version: \*\*(1\.\d+)\*\*`)
	if readme != chart || chartReadme != chart {
		t.Errorf("minimum Kubernetes version: README %s, chart README %s, Chart.yaml kubeVersion %s; want one", readme, chartReadme, chart)
	}
	for _, rel := range []string{"README.md", filepath.Join(chartPath, "README.md")} {
		if strings.Contains(read(rel), "Kubernetes 1.30 or newer") {
			t.Errorf("%s still says Kubernetes 1.30 or newer", rel)
		}
	}
}
