package metrics

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/getsentry/sandbox-controller/internal/version"
)

// TestBuildInfoOnTheManagersRegistry: Register puts build_info on
// controller-runtime's registry (the one the manager serves) with this
// binary's version, revision and Go version, value 1.
func TestBuildInfoOnTheManagersRegistry(t *testing.T) {
	Register()
	i := version.Get()
	want := `# HELP sandbox_controller_build_info Always 1; the labels say which build of the manager runs: its version, the commit it was built from (revision) and the Go version.
# TYPE sandbox_controller_build_info gauge
sandbox_controller_build_info{goversion="` + i.GoVersion + `",revision="` + i.Revision + `",version="` + i.Version + `"} 1
`
	if err := testutil.GatherAndCompare(ctrlmetrics.Registry, strings.NewReader(want), "sandbox_controller_build_info"); err != nil {
		t.Error(err)
	}
	if i.GoVersion == "" || i.Version == "" || i.Revision == "" {
		t.Errorf("a build_info label is empty: %+v", i)
	}
}

func TestBuildInfoLabels(t *testing.T) {
	c := newBuildInfo(version.Info{Version: "v0.1.0", Revision: "abc", GoVersion: "go1.26.0"})
	want := `# HELP sandbox_controller_build_info Always 1; the labels say which build of the manager runs: its version, the commit it was built from (revision) and the Go version.
# TYPE sandbox_controller_build_info gauge
sandbox_controller_build_info{goversion="go1.26.0",revision="abc",version="v0.1.0"} 1
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
}
