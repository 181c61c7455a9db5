package controllers

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
	"github.com/getsentry/sandbox-controller/internal/cost"
)

// TestBudgetCountsEachUseOnce follows one quota through counts: growth is
// counted once, priced with each object's class, a new session is one
// creation, a deleted object takes nothing back, and after a manager
// restart (a new tracker) what the objects used meanwhile is added once.
func TestBudgetCountsEachUseOnce(t *testing.T) {
	const hour = 3_600_000
	key := types.NamespacedName{Namespace: "ns", Name: "q"}
	cheap := sandboxv1.Decimal("0.1")
	prices := map[string]*sandboxv1.SandboxPrices{"cheap": {ActiveCPUHour: &cheap}}
	b := sandboxv1.SandboxBudget{Name: "cpu", Limit: "100", Window: sandboxv1.BudgetWindow{CalendarMonth: &sandboxv1.CalendarMonthWindow{}}}
	t0 := time.Date(2026, 12, 10, 0, 0, 0, 0, time.UTC)
	obj := func(class, session string, cpuHours int64) usedObject {
		return usedObject{class: class, session: session, lifetime: cost.Metered{ActiveCPUMillis: cpuHours * hour}}
	}
	tracker := &budgetTracker{}
	var st *sandboxv1.SandboxBudgetStatus
	for i, step := range []struct {
		what    string
		restart bool
		objects map[types.UID]usedObject
		want    sandboxv1.Decimal // spent in the window after the count
	}{
		{"first count: counts from now", false, map[types.UID]usedObject{"a": obj("", "s1", 10)}, "0"},
		{"a grows 1 h at the list price", false, map[types.UID]usedObject{"a": obj("", "s1", 11)}, "0.128"},
		{"b appears (class cheap, 2 h, one creation)", false, map[types.UID]usedObject{"a": obj("", "s1", 11), "b": obj("cheap", "s9", 2)}, "0.328001"},
		{"nothing changed: nothing added", false, map[types.UID]usedObject{"a": obj("", "s1", 11), "b": obj("cheap", "s9", 2)}, "0.328001"},
		{"a resumes (new session) and b is deleted", false, map[types.UID]usedObject{"a": obj("", "s2", 11)}, "0.328002"},
		{"restart: a used 2 h while no manager counted", true, map[types.UID]usedObject{"a": obj("", "s2", 13)}, "0.584002"},
		{"after the restart, per object again", false, map[types.UID]usedObject{"a": obj("", "s2", 14)}, "0.712002"},
	} {
		if step.restart {
			tracker = &budgetTracker{}
		}
		deltas, tracked := tracker.observe(key, "uid-q", step.objects)
		use := namespaceUse{objects: step.objects, deltas: deltas, tracked: tracked, prices: prices}
		now := t0.Add(time.Duration(i) * time.Minute)
		spent, counted, err := use.budgetAmounts(b, st, now)
		if err != nil {
			t.Fatal(err)
		}
		next, err := decideBudget(budgetInput{budget: b, prev: st, spent: spent, counted: counted, now: now, poll: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if next.Spent != step.want {
			t.Errorf("%s: spent %s, want %s", step.what, next.Spent, step.want)
		}
		// Status goes through the API server: times to the microsecond.
		next.CountedAt = &metav1.MicroTime{Time: next.CountedAt.Truncate(time.Microsecond)}
		st = &next
	}
}

func TestBudgetCountsSnapshotStorageOverTime(t *testing.T) {
	key := types.NamespacedName{Namespace: "ns", Name: "q"}
	b := sandboxv1.SandboxBudget{Name: "money", Limit: "100", Window: sandboxv1.BudgetWindow{CalendarMonth: &sandboxv1.CalendarMonthWindow{}}}
	objects := map[types.UID]usedObject{"snap": {storageBytes: 10_000_000_000}}
	tracker := &budgetTracker{}
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	prev := &sandboxv1.SandboxBudgetStatus{Name: "money", Unit: sandboxv1.BudgetMoney, CountedAt: &metav1.MicroTime{Time: t0}}
	tracker.observe(key, "u", objects)
	deltas, tracked := tracker.observe(key, "u", objects)
	use := namespaceUse{objects: objects, deltas: deltas, tracked: tracked}
	// 10 GB held for 3 days at $0.08 per GB-month (30 days): $0.08.
	spent, _, err := use.budgetAmounts(b, prev, t0.Add(72*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if got := cost.Format(spent); got != "0.08" {
		t.Errorf("storage for 3 days cost %s, want 0.08", got)
	}
}

// TestBudgetCountsARunningSessionsMemoryOnce: a running session's memory is
// counted as it runs (provisionedSoFar), and when it stops, Vercel's final
// figures, a little less than the count had reached and folded only after a
// poll in which the Sandbox shows neither, add nothing twice: the memory
// counted is the session's, to the poll.
func TestBudgetCountsARunningSessionsMemoryOnce(t *testing.T) {
	const mb = 2 * memoryPerVCPU // two vCPUs
	key := types.NamespacedName{Namespace: "ns", Name: "q"}
	b := sandboxv1.SandboxBudget{Name: "mem", Unit: sandboxv1.BudgetMemoryGBHours, Limit: "100",
		Window: sandboxv1.BudgetWindow{CalendarMonth: &sandboxv1.CalendarMonthWindow{}}}
	t0 := time.Date(2026, 12, 10, 0, 0, 0, 0, time.UTC)
	running := &sandboxv1.Sandbox{Status: sandboxv1.SandboxStatus{SessionID: "s1", SessionVCPUs: 2,
		StartedAt: &metav1.Time{Time: t0}, Usage: &sandboxv1.SandboxUsage{Current: &sandboxv1.SessionUsage{SessionID: "s1"}}}}
	stopping := running.DeepCopy() // stop requested: still shows the session, no figures yet
	stopped := running.DeepCopy()  // stopped, Vercel's figures not folded yet: shows neither
	stopped.Status.StoppedAt = &metav1.Time{Time: t0.Add(90 * time.Minute)}
	folded := stopped.DeepCopy()
	final := sandboxv1.UsageAmounts{SessionMillis: 89 * 60_000, MemoryMBMillis: mb * 89 * 60_000}
	folded.Status.Usage = &sandboxv1.SandboxUsage{Total: &final,
		Current: &sandboxv1.SessionUsage{SessionID: "s1", UsageAmounts: final, EndedAt: folded.Status.StoppedAt}}

	tracker := &budgetTracker{}
	var st *sandboxv1.SandboxBudgetStatus
	for _, step := range []struct {
		at   time.Duration
		sbx  *sandboxv1.Sandbox
		want string // GB-hours spent in the window
	}{
		{0, running, "0"},
		{30 * time.Minute, running, "2"},  // 4 GB × 0.5 h
		{60 * time.Minute, running, "4"},  // 4 GB × 1 h
		{90 * time.Minute, stopping, "6"}, // still provisioned
		{95 * time.Minute, stopped, "6"},  // nothing back
		{100 * time.Minute, folded, "6"},  // Vercel says 89 min: nothing back, nothing twice
		{120 * time.Minute, folded, "6"},  // stopped: no burn
	} {
		now := t0.Add(step.at)
		o := usedObjectOf("", step.sbx.Status.Usage, 0)
		o.lifetime = o.lifetime.Add(provisionedSoFar(step.sbx, now))
		objects := map[types.UID]usedObject{"a": o}
		deltas, tracked := tracker.observe(key, "uid-q", objects)
		use := namespaceUse{objects: objects, deltas: deltas, tracked: tracked}
		spent, counted, err := use.budgetAmounts(b, st, now)
		if err != nil {
			t.Fatal(err)
		}
		next, err := decideBudget(budgetInput{budget: b, prev: st, spent: spent, counted: counted, now: now, poll: 10 * time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if string(next.Spent) != step.want {
			t.Errorf("at %v: spent %s GB-hours, want %s", step.at, next.Spent, step.want)
		}
		st = &next
	}
}

// TestMoneyInTwoCurrenciesIsAnError: a namespace whose classes price in two
// currencies cannot be summed in money; the error names the classes.
func TestMoneyInTwoCurrenciesIsAnError(t *testing.T) {
	eur := &sandboxv1.SandboxPrices{Currency: "EUR"}
	use := namespaceUse{objects: map[types.UID]usedObject{"a": {class: "euro"}, "b": {class: ""}}, prices: map[string]*sandboxv1.SandboxPrices{"euro": eur}}
	if _, err := use.priceCurrency(); err == nil || !strings.Contains(err.Error(), "(no class) in USD, euro in EUR") {
		t.Errorf("got %v, want an error naming both classes and currencies", err)
	}
	use.objects = map[types.UID]usedObject{"a": {class: "euro"}}
	if c, err := use.priceCurrency(); err != nil || c != "EUR" {
		t.Errorf("one class in EUR: got %q, %v", c, err)
	}
}
