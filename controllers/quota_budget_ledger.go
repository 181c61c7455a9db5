package controllers

// Where budgets meet the quota ledger: the SandboxQuota reconciler tells the
// ledger which budgets refuse session starts as it decides it, and the
// ledger refuses starts from that, not from the quota's status in the cache,
// which shows the decision a moment later (a waiter woken because a budget
// let go would otherwise read the old status and wait another minute).
// Until a quota's first count since the manager started, its status stands
// in.

import (
	"fmt"
	"sync"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
)

// budgetRefusals is, by quota, the budget that refuses starts ("" when
// none does).
type budgetRefusals struct {
	mu     sync.Mutex
	byName map[types.NamespacedName]string
}

// setBudgetRefusal records which budget of q refuses starts now, from
// q.Status.Budgets as just decided, and reports whether q stopped refusing.
func (l *QuotaLedger) setBudgetRefusal(q *sandboxv1.SandboxQuota) (letGo bool) {
	if l == nil {
		return false
	}
	name := refusingBudget(q.Status.Budgets)
	b := &l.budgets
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.byName == nil {
		b.byName = map[types.NamespacedName]string{}
	}
	key := client.ObjectKeyFromObject(q)
	was, known := b.byName[key]
	if !known {
		was = refusingBudget(q.Status.Budgets)
	}
	b.byName[key] = name
	return was != "" && name == ""
}

// forgetBudgetRefusal drops a quota that is gone.
func (l *QuotaLedger) forgetBudgetRefusal(key types.NamespacedName) {
	if l == nil {
		return
	}
	l.budgets.mu.Lock()
	defer l.budgets.mu.Unlock()
	delete(l.budgets.byName, key)
}

// budgetRefusal is why a budget of one of quotas refuses a start of what
// now; "" when none does. The message stays the same while the start
// waits, so waking it writes nothing new.
func (l *QuotaLedger) budgetRefusal(quotas []sandboxv1.SandboxQuota, what string) string {
	l.budgets.mu.Lock()
	defer l.budgets.mu.Unlock()
	for i := range quotas {
		q := &quotas[i]
		if !q.DeletionTimestamp.IsZero() {
			continue
		}
		name, known := l.budgets.byName[client.ObjectKeyFromObject(q)]
		if !known {
			name = refusingBudget(q.Status.Budgets)
		}
		if name != "" {
			return fmt.Sprintf("SandboxQuota %s: budget %s is spent; this %s waits and starts by itself when the budget allows it (a new window, a raised limit)",
				q.Name, name, what)
		}
	}
	return ""
}

// refusingBudget is the first budget whose action refuses starts.
func refusingBudget(list []sandboxv1.SandboxBudgetStatus) string {
	for _, b := range list {
		if b.Action == sandboxv1.BudgetActionRefuse || b.Action == sandboxv1.BudgetActionStop {
			return b.Name
		}
	}
	return ""
}
