package metrics

import "github.com/prometheus/client_golang/prometheus"

// The usage and budget gauges. Their series grow with namespaces × classes
// and with budgets (a handful per SandboxQuota), never with Sandboxes.
var (
	// UsageCost is what the existing Sandboxes and SandboxSnapshots of a
	// namespace cost over their lives (status.usage.total at their class's
	// prices), by class ("" for objects of no class).
	UsageCost = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: namespace,
		Name:      "usage_cost",
		Help:      "Lifetime cost of the existing Sandboxes and SandboxSnapshots of a namespace with a SandboxQuota (status.usage.total at the class's prices), by namespace, class and currency.",
	}, []string{"namespace", "class", "currency"})

	// UsageActiveCPUSeconds is the active CPU time of the same objects.
	UsageActiveCPUSeconds = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: namespace,
		Name:      "usage_active_cpu_seconds",
		Help:      "Lifetime active CPU seconds of the existing Sandboxes and SandboxSnapshots of a namespace with a SandboxQuota, by namespace and class.",
	}, []string{"namespace", "class"})

	// BudgetSpent is what a budget's window spent so far (status.budgets[].spent).
	BudgetSpent = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: namespace,
		Name:      "budget_spent",
		Help:      "Amount a SandboxQuota budget's current window spent, in the budget's unit, by namespace, quota, budget and unit.",
	}, []string{"namespace", "quota", "budget", "unit"})

	// BudgetProjected is spent plus the burn rate until the window ends.
	BudgetProjected = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: namespace,
		Name:      "budget_projected",
		Help:      "Amount a SandboxQuota budget is projected to spend by the end of its window at the current burn rate, by namespace, quota, budget and unit.",
	}, []string{"namespace", "quota", "budget", "unit"})

	// BudgetLimit is a budget's spec.budgets[].limit.
	BudgetLimit = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: namespace,
		Name:      "budget_limit",
		Help:      "Limit of a SandboxQuota budget, in its unit, by namespace, quota, budget and unit.",
	}, []string{"namespace", "quota", "budget", "unit"})

	// BudgetAction is 1 for the action a budget has in force, 0 for the others.
	BudgetAction = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: namespace,
		Name:      "budget_action",
		Help:      "1 for the action (None, Warn, Refuse, Stop) a SandboxQuota budget has in force, by namespace, quota, budget and action.",
	}, []string{"namespace", "quota", "budget", "action"})
)

// usageCollectors are registered by Register.
func usageCollectors() []prometheus.Collector {
	return []prometheus.Collector{UsageCost, UsageActiveCPUSeconds, BudgetSpent, BudgetProjected, BudgetLimit, BudgetAction}
}

// BudgetFigures is one budget's state for the gauges.
type BudgetFigures struct {
	Name, Unit, Action      string
	Spent, Projected, Limit float64
}

// SetBudgets records a SandboxQuota's budgets; budgets no longer in it are
// dropped.
func SetBudgets(ns, quota string, budgets []BudgetFigures) {
	forgetBudgets(ns, quota)
	for _, b := range budgets {
		BudgetSpent.WithLabelValues(ns, quota, b.Name, b.Unit).Set(b.Spent)
		BudgetProjected.WithLabelValues(ns, quota, b.Name, b.Unit).Set(b.Projected)
		BudgetLimit.WithLabelValues(ns, quota, b.Name, b.Unit).Set(b.Limit)
		for _, a := range []string{"None", "Warn", "Refuse", "Stop"} {
			v := 0.0
			if a == b.Action {
				v = 1
			}
			BudgetAction.WithLabelValues(ns, quota, b.Name, a).Set(v)
		}
	}
}

func forgetBudgets(ns, quota string) {
	l := prometheus.Labels{"namespace": ns, "quota": quota}
	for _, g := range []*prometheus.GaugeVec{BudgetSpent, BudgetProjected, BudgetLimit, BudgetAction} {
		g.DeletePartialMatch(l)
	}
}

// ClassUsage is one class's lifetime usage in a namespace.
type ClassUsage struct {
	Class, Currency  string
	Cost             float64
	ActiveCPUSeconds float64
}

// SetNamespaceUsage records the usage of a namespace by class.
func SetNamespaceUsage(ns string, classes []ClassUsage) {
	ForgetNamespaceUsage(ns)
	for _, c := range classes {
		UsageCost.WithLabelValues(ns, c.Class, c.Currency).Set(c.Cost)
		UsageActiveCPUSeconds.WithLabelValues(ns, c.Class).Set(c.ActiveCPUSeconds)
	}
}

// ForgetNamespaceUsage drops a namespace's usage series (its last
// SandboxQuota is gone), and ForgetQuotaBudgets a quota's budget series.
func ForgetNamespaceUsage(ns string) {
	l := prometheus.Labels{"namespace": ns}
	UsageCost.DeletePartialMatch(l)
	UsageActiveCPUSeconds.DeletePartialMatch(l)
}

// ForgetQuotaBudgets drops the budget series of a SandboxQuota that is gone.
func ForgetQuotaBudgets(ns, quota string) { forgetBudgets(ns, quota) }
