package version

import (
	"encoding/json"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
)

func TestGetPrefersLinkerValues(t *testing.T) {
	const commit = "0123456789abcdef0123456789abcdef01234567"
	bi := func(mainVersion string, settings ...string) *debug.BuildInfo {
		b := &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Path: "github.com/getsentry/sandbox-controller", Version: mainVersion}}
		for i := 0; i+1 < len(settings); i += 2 {
			b.Settings = append(b.Settings, debug.BuildSetting{Key: settings[i], Value: settings[i+1]})
		}
		return b
	}
	for _, tc := range []struct {
		name                 string
		bi                   *debug.BuildInfo
		ldVersion, ldCommit  string
		wantVersion, wantRev string
		wantTime             string
		wantModified         bool
	}{
		{"nothing known", nil, "", "", Unknown, Unknown, "", false},
		{"devel build without vcs", bi("(devel)"), "", "", Unknown, Unknown, "", false},
		{"plain go build in a checkout", bi("v0.0.0-20250102030405-0123456789ab", "vcs.revision", commit, "vcs.time", "2025-01-02T03:04:05Z"),
			"", "", "v0.0.0-20250102030405-0123456789ab", commit, "2025-01-02T03:04:05Z", false},
		{"dirty tree, go marks the pseudo-version", bi("v0.0.0-20250102030405-0123456789ab+dirty", "vcs.revision", commit, "vcs.time", "2025-01-02T03:04:05Z", "vcs.modified", "true"),
			"", "", "v0.0.0-20250102030405-0123456789ab+dirty", commit, "2025-01-02T03:04:05Z", true},
		{"dirty tree, tagged version", bi("v0.1.0", "vcs.revision", commit, "vcs.modified", "true"),
			"", "", "v0.1.0+dirty", commit, "", true},
		{"make: ldflags and the same commit", bi("(devel)", "vcs.revision", commit, "vcs.time", "2025-01-02T04:04:05+01:00"),
			"v0.1.0", commit, "v0.1.0", commit, "2025-01-02T03:04:05Z", false},
		{"git describe already says dirty", bi("(devel)", "vcs.revision", commit, "vcs.modified", "true"),
			"v0.1.0-2-g0123456-dirty", commit, "v0.1.0-2-g0123456-dirty", commit, "", true},
		{"Docker build: ldflags, no vcs", nil, "v0.1.0", commit, "v0.1.0", commit, "", false},
		{"ldflags name another commit than vcs", bi("(devel)", "vcs.revision", "ffff", "vcs.time", "2025-01-02T03:04:05Z", "vcs.modified", "true"),
			"v0.1.0", commit, "v0.1.0", commit, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := get(tc.bi, tc.ldVersion, tc.ldCommit)
			if got.Version != tc.wantVersion || got.Revision != tc.wantRev || got.Time != tc.wantTime || got.Modified != tc.wantModified {
				t.Errorf("get = %+v, want version %q revision %q time %q modified %v", got, tc.wantVersion, tc.wantRev, tc.wantTime, tc.wantModified)
			}
			for k, v := range got.LeaseLabels() {
				if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
					t.Errorf("Lease label %s=%q is not a valid label value: %v", k, v, errs)
				}
			}
		})
	}
}

func TestString(t *testing.T) {
	i := Info{Version: "v0.1.0", Revision: "0123456789abcdef0123456789abcdef01234567", Time: "2025-01-02T03:04:05Z", GoVersion: "go1.26.0", Platform: "linux/amd64"}
	if got, want := i.String(), "v0.1.0 (revision 0123456789ab, 2025-01-02T03:04:05Z, go1.26.0 linux/amd64)"; got != want {
		t.Errorf("String = %q, want %q", got, want)
	}
	i = Info{Version: Unknown, Revision: Unknown, GoVersion: "go1.26.0", Platform: "darwin/arm64"}
	if got, want := i.String(), "unknown (revision unknown, go1.26.0 darwin/arm64)"; got != want {
		t.Errorf("String = %q, want %q", got, want)
	}
}

func TestLabelValue(t *testing.T) {
	for in, want := range map[string]string{
		"v0.1.0":                  "v0.1.0",
		"v0.1.0-3-gabc1234-dirty": "v0.1.0-3-gabc1234-dirty",
		"v0.0.0-20250102030405-0123456789ab+dirty": "v0.0.0-20250102030405-0123456789ab_dirty",
		"+x+":                   "x",
		strings.Repeat("a", 70): strings.Repeat("a", 63),
		"(devel)":               "devel",
	} {
		got := LabelValue(in)
		if got != want {
			t.Errorf("LabelValue(%q) = %q, want %q", in, got, want)
		}
		if errs := validation.IsValidLabelValue(got); len(errs) > 0 {
			t.Errorf("LabelValue(%q) = %q is invalid: %v", in, got, errs)
		}
	}
}

// TestPlainGoBuildReportsTheCommit builds a program with `go build` and no
// -ldflags, as `go install` would, and checks it reports this checkout's
// commit and commit time from the build info; with -ldflags -X, the
// version make passes.
func TestPlainGoBuildReportsTheCommit(t *testing.T) {
	head := git(t, "rev-parse", "HEAD")
	commitTime := git(t, "log", "-1", "--format=%cd", "--date=format-local:%Y-%m-%dT%H:%M:%SZ")
	bin := filepath.Join(t.TempDir(), "printversion")
	run := func(args ...string) Info {
		t.Helper()
		// -buildvcs=auto is go build's default (GOFLAGS may turn it off).
		build := exec.Command("go", append(append([]string{"build", "-buildvcs=auto", "-o", bin}, args...), "./testdata/printversion")...)
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("go build: %v\n%s", err, out)
		}
		out, err := exec.Command(bin).Output()
		if err != nil {
			t.Fatal(err)
		}
		var i Info
		if err := json.Unmarshal(out, &i); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		return i
	}
	i := run()
	if i.Revision != head {
		t.Errorf("plain go build reports revision %q, want HEAD %s", i.Revision, head)
	}
	if i.Time != commitTime {
		t.Errorf("plain go build reports commit time %q, want %s", i.Time, commitTime)
	}
	if i.Version == Unknown || !strings.HasPrefix(i.Version, "v") {
		t.Errorf("plain go build reports version %q, want the module's (pseudo-)version", i.Version)
	}
	i = run("-ldflags", "-X github.com/getsentry/sandbox-controller/internal/version.version=v9.8.7-test")
	if i.Version != "v9.8.7-test" && i.Version != "v9.8.7-test+dirty" {
		t.Errorf("with -ldflags -X version, reports %q, want v9.8.7-test", i.Version)
	}
	if i.Revision != head {
		t.Errorf("with -ldflags -X version only, reports revision %q, want HEAD %s", i.Revision, head)
	}
}

func git(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Env = append(cmd.Environ(), "TZ=UTC")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("git %v: %v", args, err)
	}
	return strings.TrimSpace(string(out))
}
