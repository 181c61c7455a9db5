package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/getsentry/sandbox-controller/internal/version"
)

// BuildInfo is 1, labelled with the version and commit of the running
// manager (internal/version) and the Go that built it, as Prometheus's own
// prometheus_build_info: `count by (version) (sandbox_controller_build_info)`
// shows which builds run during a rollout.
var BuildInfo = newBuildInfo(version.Get())

func newBuildInfo(i version.Info) prometheus.Collector {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: namespace,
		Name:      "build_info",
		Help:      "Always 1; the labels say which build of the manager runs: its version, the commit it was built from (revision) and the Go version.",
		ConstLabels: prometheus.Labels{
			"version":   i.Version,
			"revision":  i.Revision,
			"goversion": i.GoVersion,
		},
	})
	g.Set(1)
	return g
}
