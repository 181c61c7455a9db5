package metrics

import "github.com/prometheus/client_golang/prometheus"

// The SandboxQuota gauges. Their series grow with the number of
// SandboxQuotas (a handful per namespace), not with the number of Sandboxes.
var (
	// QuotaUsed is how much of each resource a SandboxQuota limits its
	// namespace uses, as the controllers count it (status.used).
	QuotaUsed = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: namespace,
		Name:      "quota_used",
		Help:      "Amount of a resource a SandboxQuota limits that its namespace uses (status.used), by namespace, quota and resource.",
	}, []string{"namespace", "quota", "resource"})

	// QuotaHard is each limit of a SandboxQuota (spec.hard).
	QuotaHard = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: namespace,
		Name:      "quota_hard",
		Help:      "Hard limit of a resource in a SandboxQuota (spec.hard), by namespace, quota and resource.",
	}, []string{"namespace", "quota", "resource"})
)

// SetQuota records one SandboxQuota's limits and usage, by resource name;
// resources it no longer limits are dropped.
func SetQuota(ns, quota string, hard, used map[string]int64) {
	ForgetQuota(ns, quota)
	for r, v := range hard {
		QuotaHard.WithLabelValues(ns, quota, r).Set(float64(v))
		QuotaUsed.WithLabelValues(ns, quota, r).Set(float64(used[r]))
	}
}

// ForgetQuota drops the series of a SandboxQuota that is gone.
func ForgetQuota(ns, quota string) {
	l := prometheus.Labels{"namespace": ns, "quota": quota}
	QuotaHard.DeletePartialMatch(l)
	QuotaUsed.DeletePartialMatch(l)
}
