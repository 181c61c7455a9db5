// Package version says which build of sandbox-controller is running: the
// release version and the commit it was built from, for --version, the
// manager's start log, the sandbox_controller_build_info metric, the labels
// on the manager's leader election Lease and `kubectl sandbox version`.
//
// `make` sets Version and Revision with
//
//	-ldflags "-X github.com/getsentry/sandbox-controller/internal/version.version=v0.1.0
//	          -X github.com/getsentry/sandbox-controller/internal/version.revision=<commit>
//	          -X github.com/getsentry/sandbox-controller/internal/version.commitTime=<RFC 3339>"
//
// A plain `go build` or `go install` in a git checkout needs no flags: the Go
// toolchain records the module version (a tag, or a pseudo-version) and the
// commit (vcs.revision, vcs.time, vcs.modified) in the binary, and Get reads
// them back with runtime/debug.ReadBuildInfo.
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
	"time"
)

// Set by -ldflags -X (see the package comment); empty otherwise.
var (
	version    string
	revision   string
	commitTime string
)

// Unknown is reported for what neither the linker flags nor the build info say.
const Unknown = "unknown"

// Info describes one build.
type Info struct {
	// Version is the release version (v0.1.0, v0.1.0-3-gabc1234-dirty), the
	// module's pseudo-version for an untagged build, or "unknown".
	Version string `json:"version"`
	// Revision is the full commit hash, or "unknown".
	Revision string `json:"revision"`
	// Time is the commit's time (RFC 3339, UTC), or "" when not recorded.
	Time string `json:"commitTime,omitempty"`
	// Modified is true when the work tree had uncommitted changes.
	Modified bool `json:"modified,omitempty"`
	// GoVersion is the Go toolchain that built the binary.
	GoVersion string `json:"goVersion"`
	// Platform is GOOS/GOARCH.
	Platform string `json:"platform"`
}

// Get returns this binary's build information.
func Get() Info {
	bi, _ := debug.ReadBuildInfo()
	i := get(bi, version, revision)
	if commitTime != "" && (revision == "" || i.Time == "") {
		i.Time = utc(commitTime)
	}
	return i
}

// utc normalises an RFC 3339 time to UTC ("Z"); other text is kept.
func utc(s string) string {
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t.UTC().Format(time.RFC3339)
	}
	return s
}

// get combines the linker-set values with the build info (nil when the
// binary has none); the linker's win.
func get(bi *debug.BuildInfo, ldVersion, ldRevision string) Info {
	info := Info{GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	var vcsRevision, vcsTime string
	var modified bool
	if bi != nil {
		info.GoVersion = bi.GoVersion
		if v := bi.Main.Version; v != "" && v != "(devel)" {
			info.Version = v
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				vcsRevision = s.Value
			case "vcs.time":
				vcsTime = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
	}
	if ldVersion != "" {
		info.Version = ldVersion
	}
	info.Revision = vcsRevision
	if ldRevision != "" {
		info.Revision = ldRevision
	}
	// The commit time and the dirty flag belong to the build info's
	// commit; they are kept only when the linker names the same one (or none).
	if ldRevision == "" || ldRevision == vcsRevision {
		info.Time, info.Modified = vcsTime, modified
	}
	info.Time = utc(info.Time)
	if info.Modified && info.Version != "" && !strings.Contains(info.Version, "dirty") {
		info.Version += "+dirty"
	}
	if info.Version == "" {
		info.Version = Unknown
	}
	if info.Revision == "" {
		info.Revision = Unknown
	}
	return info
}

// ShortRevision is the commit's first 12 hex digits (or Unknown).
func (i Info) ShortRevision() string {
	if len(i.Revision) > 12 && i.Revision != Unknown {
		return i.Revision[:12]
	}
	return i.Revision
}

// String is the one line --version prints after the program's name:
// "v0.1.0 (revision 0123456789ab, 2025-01-02T03:04:05Z, go1.26.0 linux/amd64)".
func (i Info) String() string {
	parts := []string{"revision " + i.ShortRevision()}
	if i.Time != "" {
		parts = append(parts, i.Time)
	}
	parts = append(parts, i.GoVersion+" "+i.Platform)
	return fmt.Sprintf("%s (%s)", i.Version, strings.Join(parts, ", "))
}

// Label names of the leader election Lease: the manager sets them (with
// leader election on) to the version of the replica holding the Lease, so
// that `kubectl sandbox version` can report the version that reconciles.
const (
	// LabelName selects the manager's Leases.
	LabelName = "app.kubernetes.io/name"
	// LabelVersion carries Info.Version as a label value (LabelValue).
	LabelVersion = "app.kubernetes.io/version"
	// LabelRevision carries Info.Revision.
	LabelRevision = "sandbox.sentry.io/revision"
	// Name is LabelName's value.
	Name = "sandbox-controller"
)

// LeaseLabels are the labels the manager's leader election Lease carries.
func (i Info) LeaseLabels() map[string]string {
	return map[string]string{
		LabelName:     Name,
		LabelVersion:  LabelValue(i.Version),
		LabelRevision: LabelValue(i.Revision),
	}
}

// LabelValue turns s into a valid label value: at most 63 characters of
// [A-Za-z0-9._-], beginning and ending with a letter or digit. Versions are
// label-safe except for the "+" of a pseudo-version's build metadata
// ("+dirty"), which becomes "_".
func LabelValue(s string) string {
	b := []byte(s)
	for i, c := range b {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '.', c == '-', c == '_':
		default:
			b[i] = '_'
		}
	}
	if len(b) > 63 {
		b = b[:63]
	}
	alnum := func(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' }
	for len(b) > 0 && !alnum(b[0]) {
		b = b[1:]
	}
	for len(b) > 0 && !alnum(b[len(b)-1]) {
		b = b[:len(b)-1]
	}
	return string(b)
}
