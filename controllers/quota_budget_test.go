package controllers_test

import (
	"context"
	"net/http/httptest"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
	"github.com/getsentry/sandbox-controller/internal/metrics"
)

// busyLoop counts in the shell itself: a second or so of CPU, at least
// 200 ms (the usage specs measure it).
const budgetBusyLoop = `i=0; while [ $i -lt 600000 ]; do i=$((i+1)); done`

// cpuBudgetLimit is 0.18 s of active CPU in hours: one busy loop crosses it.
const cpuBudgetLimit = sandboxv1.Decimal("0.00005")

// The budget specs drive usage through the emulator: real sessions (each a
// creation) and a CPU-busy setup command whose active CPU Vercel (the
// emulator) reports when the session stops, which the Sandbox controller
// folds into status.usage.
var _ = Describe("SandboxQuota budgets", func() {
	ctx := context.Background()
	busySpec := func() sandboxv1.SandboxSpec {
		return sandboxv1.SandboxSpec{Source: runtimeSource("node24"),
			Setup: []sandboxv1.SetupCommand{{Name: "work", Command: "sh", Args: []string{"-c", budgetBusyLoop}}}}
	}
	// burnCPU runs a CPU-busy Sandbox and pauses it: its CPU reaches status.
	burnCPU := func(ns, name string) types.NamespacedName {
		GinkgoHelper()
		if emu.ExecMode() == "none" {
			Skip("exec mode none runs no process: no CPU to count")
		}
		key := types.NamespacedName{Namespace: ns, Name: name}
		newSandbox(ns, name, busySpec())
		waitReady(key)
		setState(key, sandboxv1.SandboxStateStopped)
		Eventually(func(g Gomega) {
			u := getSandbox(key).Status.Usage
			g.Expect(u).NotTo(BeNil())
			g.Expect(u.Total).NotTo(BeNil())
			g.Expect(u.Total.ActiveCPUMillis).To(BeNumerically(">=", 200))
		}).Should(Succeed())
		return key
	}

	It("warn at a percentage (condition, event, webhook), refuse new starts and resumes once CPU crosses the limit, and let them start when it is raised", func() {
		ns := newNamespace()
		hook := &webhook{key: []byte("budget-namespace-signing-key-0123456789")}
		srv := httptest.NewServer(hook)
		DeferCleanup(srv.Close)
		configureNotifications(ns, srv.URL, hook.key)
		month := sandboxv1.BudgetWindow{CalendarMonth: &sandboxv1.CalendarMonthWindow{TimeZone: "Europe/Vienna"}}
		q := newBudgetQuota(ns, "team",
			sandboxv1.SandboxBudget{Name: "starts", Unit: sandboxv1.BudgetCreations, Limit: "10", WarnAtPercent: ptr.To[int32](10),
				Enforcement: sandboxv1.BudgetWarnOnly, Window: month},
			sandboxv1.SandboxBudget{Name: "cpu", Unit: sandboxv1.BudgetActiveCPUHours, Limit: cpuBudgetLimit,
				Projection: sandboxv1.BudgetProjectNone, Window: month})

		By("the first session is one creation of ten: 10 %, a warning")
		busy := burnCPU(ns, "busy")
		Eventually(budget(q, "starts")).Should(And(HaveField("Action", sandboxv1.BudgetActionWarn), HaveField("Spent", sandboxv1.Decimal("1")),
			HaveField("Percent", BeEquivalentTo(10))))
		Eventually(quotaCondition(q, sandboxv1.ConditionBudgetWarning)).Should(HaveField("Status", metav1.ConditionTrue))
		expectEvent(client.ObjectKeyFromObject(q), "Warning BudgetWarning: ")
		Eventually(func() []receivedEvent { return hook.received("io.sentry.sandbox.sandboxquota.budgetwarning", q.Name) }, 5*time.Second).ShouldNot(BeEmpty())
		Expect(testutil.ToFloat64(metrics.BudgetSpent.WithLabelValues(ns, q.Name, "starts", "Creations"))).To(BeNumerically(">=", 1))

		By("the busy loop's CPU, reported at the pause, crosses the CPU budget: refused, announced")
		Eventually(budget(q, "cpu")).Should(HaveField("Action", sandboxv1.BudgetActionRefuse))
		Eventually(quotaCondition(q, sandboxv1.ConditionBudgetExceeded)).Should(HaveField("Status", metav1.ConditionTrue))
		Eventually(func() []receivedEvent { return hook.received("io.sentry.sandbox.sandboxquota.budgetexceeded", q.Name) }, 5*time.Second).Should(HaveLen(1))
		Expect(testutil.ToFloat64(metrics.UsageActiveCPUSeconds.WithLabelValues(ns, ""))).To(BeNumerically(">=", 0.2))

		By("a new Sandbox and the resume of the paused one wait, and nothing reaches Vercel")
		sessions := len(namespaceSessions(ns))
		c := types.NamespacedName{Namespace: ns, Name: "c"}
		newSandbox(ns, c.Name, sandboxv1.SandboxSpec{Source: runtimeSource("node24")})
		setState(busy, sandboxv1.SandboxStateRunning)
		for _, key := range []types.NamespacedName{c, busy} {
			Eventually(readyCondition(key)).Should(And(HaveField("Reason", sandboxv1.ReasonQuotaExceeded),
				HaveField("Message", ContainSubstring("SandboxQuota team: budget cpu is spent"))))
		}
		Consistently(func() int { return len(namespaceSessions(ns)) }, 3*time.Second).Should(Equal(sessions), "a refused start reached Vercel")

		By("raising the limit lets both start by themselves")
		Eventually(func() error {
			cur := &sandboxv1.SandboxQuota{}
			if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(q), cur); err != nil {
				return err
			}
			cur.Spec.Budgets[1].Limit = "1"
			return k8sClient.Update(ctx, cur)
		}).Should(Succeed())
		waitReady(c)
		waitReady(busy)
		Eventually(quotaCondition(q, sandboxv1.ConditionBudgetExceeded)).Should(HaveField("Status", metav1.ConditionFalse))
	})

	It("stop the running Sandboxes at a hard limit with enforcement Stop", func() {
		ns := newNamespace()
		q := newBudgetQuota(ns, "hard", sandboxv1.SandboxBudget{Name: "day", Unit: sandboxv1.BudgetActiveCPUHours, Limit: cpuBudgetLimit,
			Enforcement: sandboxv1.BudgetStop, Window: sandboxv1.BudgetWindow{RollingSeconds: ptr.To[int64](86400)}, Projection: sandboxv1.BudgetProjectNone})
		other := types.NamespacedName{Namespace: ns, Name: "other"}
		newSandbox(ns, other.Name, sandboxv1.SandboxSpec{Source: runtimeSource("node24")})
		waitReady(other)
		burnCPU(ns, "busy")
		Eventually(budget(q, "day")).Should(HaveField("Action", sandboxv1.BudgetActionStop))
		Eventually(func() sandboxv1.SandboxState { return getSandbox(other).Spec.State }).Should(Equal(sandboxv1.SandboxStateStopped))
		expectEvent(other, "Warning BudgetStopped: SandboxQuota hard: a budget with enforcement Stop is spent")
		Eventually(func() int { return runningSessions(ns) }).Should(BeZero(), "a session still runs in the emulator")
	})

	It("stop a pool's warm member at a Stop budget; the pool resumes it, which waits for the budget without a fight, and refills when the budget is raised", func() {
		ns := newNamespace()
		pool := newPool(ns, "warm", 1, poolTemplate())
		member := client.ObjectKeyFromObject(&waitPoolReady(pool, 1)[0])
		// A few seconds of the member's memory; no projection: it runs to
		// the limit.
		q := newBudgetQuota(ns, "hard", sandboxv1.SandboxBudget{Name: "mem", Unit: sandboxv1.BudgetMemoryGBHours, Limit: "0.004",
			Enforcement: sandboxv1.BudgetStop, Window: sandboxv1.BudgetWindow{RollingSeconds: ptr.To[int64](3600)}, Projection: sandboxv1.BudgetProjectNone})
		Eventually(budget(q, "mem"), 30*time.Second).Should(HaveField("Action", sandboxv1.BudgetActionStop))
		expectEvent(member, "Warning BudgetStopped: SandboxQuota hard")
		Eventually(func() int { return runningSessions(ns) }).Should(BeZero(), "the member's session ended")

		By("the pool sets its member Running again; the resume waits for the budget, and the quota leaves it alone")
		// Ready may say QuotaExceeded before the pool's write of the state
		// lands (a reconcile of the stopped member sees the spent budget
		// too): both are waited for.
		Eventually(func(g Gomega) {
			g.Expect(readyCondition(member)(g)).To(And(HaveField("Reason", sandboxv1.ReasonQuotaExceeded),
				HaveField("Message", ContainSubstring("budget mem is spent"))))
			g.Expect(getSandbox(member).Spec.State).NotTo(Equal(sandboxv1.SandboxStateStopped), "the pool set its member running again")
		}).Should(Succeed())
		Consistently(func(g Gomega) {
			g.Expect(getSandbox(member).Spec.State).NotTo(Equal(sandboxv1.SandboxStateStopped), "stopped again: the quota and the pool fight")
			g.Expect(runningSessions(ns)).To(BeZero(), "a session started past the budget")
		}, 3*pollInterval).Should(Succeed())
		Eventually(func() string { return poolReadyReason(pool) }).Should(Equal(sandboxv1.ReasonQuotaExceeded))

		By("raising the limit: the member runs and the pool is ready to claim again")
		Eventually(func() error {
			cur := &sandboxv1.SandboxQuota{}
			if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(q), cur); err != nil {
				return err
			}
			cur.Spec.Budgets[0].Limit = "10"
			return k8sClient.Update(ctx, cur)
		}).Should(Succeed())
		waitPoolReady(pool, 1)
	})

	It("refuse before the limit when the burn rate would cross it before the next count", func() {
		ns := newNamespace()
		q := newBudgetQuota(ns, "burn", sandboxv1.SandboxBudget{Name: "starts", Unit: sandboxv1.BudgetCreations, Limit: "3",
			Window: sandboxv1.BudgetWindow{CalendarMonth: &sandboxv1.CalendarMonthWindow{}}})
		// Two sessions within one count interval: at that rate the next
		// interval brings the third, so the third waits at 2 of 3.
		newSandbox(ns, "a", sandboxv1.SandboxSpec{Source: runtimeSource("node24")})
		newSandbox(ns, "b", sandboxv1.SandboxSpec{Source: runtimeSource("node24")})
		Eventually(budget(q, "starts"), 15*time.Second, 100*time.Millisecond).Should(And(
			HaveField("Action", sandboxv1.BudgetActionRefuse), HaveField("Spent", sandboxv1.Decimal("2")),
			HaveField("Message", ContainSubstring("the current burn rate reaches the limit before the next count"))))
	})

	It("refuse a window that sets both kinds, a bad limit and a duplicate name, naming the field", func() {
		ns := newNamespace()
		for _, tc := range []struct {
			b    []sandboxv1.SandboxBudget
			want string
		}{
			{[]sandboxv1.SandboxBudget{{Name: "x", Limit: "1", Window: sandboxv1.BudgetWindow{RollingSeconds: ptr.To[int64](3600), CalendarMonth: &sandboxv1.CalendarMonthWindow{}}}},
				"spec.budgets[].window must set exactly one of rollingSeconds and calendarMonth"},
			{[]sandboxv1.SandboxBudget{{Name: "x", Limit: "1", Window: sandboxv1.BudgetWindow{}}}, "spec.budgets[].window must set exactly one"},
			{[]sandboxv1.SandboxBudget{{Name: "x", Limit: "-1", Window: sandboxv1.BudgetWindow{RollingSeconds: ptr.To[int64](3600)}}}, "spec.budgets[0].limit"},
			{[]sandboxv1.SandboxBudget{{Name: "x", Limit: "1", Window: sandboxv1.BudgetWindow{RollingSeconds: ptr.To[int64](60)}}}, "spec.budgets[0].window.rollingSeconds"},
			{[]sandboxv1.SandboxBudget{{Name: "x", Limit: "1", Window: sandboxv1.BudgetWindow{RollingSeconds: ptr.To[int64](3600)}},
				{Name: "x", Limit: "2", Window: sandboxv1.BudgetWindow{RollingSeconds: ptr.To[int64](3600)}}}, "spec.budgets[1]: Duplicate value"},
		} {
			q := &sandboxv1.SandboxQuota{ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: "bad-"}, Spec: sandboxv1.SandboxQuotaSpec{Budgets: tc.b}}
			err := k8sClient.Create(ctx, q)
			Expect(err).To(HaveOccurred(), tc.want)
			Expect(err.Error()).To(ContainSubstring(tc.want))
		}
	})
})

// newBudgetQuota creates a SandboxQuota with budgets and waits for their
// first count: a budget counts from then.
func newBudgetQuota(ns, name string, budgets ...sandboxv1.SandboxBudget) *sandboxv1.SandboxQuota {
	GinkgoHelper()
	q := &sandboxv1.SandboxQuota{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: sandboxv1.SandboxQuotaSpec{Budgets: budgets}}
	Expect(k8sClient.Create(context.Background(), q)).To(Succeed())
	for _, b := range budgets {
		Eventually(budget(q, b.Name)).Should(HaveField("CountedAt", Not(BeNil())))
	}
	return q
}

// budget reads one budget's status.
func budget(q *sandboxv1.SandboxQuota, name string) func(Gomega) sandboxv1.SandboxBudgetStatus {
	return func(g Gomega) sandboxv1.SandboxBudgetStatus {
		cur := &sandboxv1.SandboxQuota{}
		g.Expect(k8sClient.Get(context.Background(), client.ObjectKeyFromObject(q), cur)).To(Succeed())
		for _, b := range cur.Status.Budgets {
			if b.Name == name {
				return b
			}
		}
		g.Expect(cur.Status.Budgets).To(ContainElement(HaveField("Name", name)))
		return sandboxv1.SandboxBudgetStatus{}
	}
}

func quotaCondition(q *sandboxv1.SandboxQuota, typ string) func(Gomega) metav1.Condition {
	return func(g Gomega) metav1.Condition {
		cur := &sandboxv1.SandboxQuota{}
		g.Expect(k8sClient.Get(context.Background(), client.ObjectKeyFromObject(q), cur)).To(Succeed())
		for _, c := range cur.Status.Conditions {
			if c.Type == typ {
				return c
			}
		}
		g.Expect(cur.Status.Conditions).To(ContainElement(HaveField("Type", typ)))
		return metav1.Condition{}
	}
}

// poolReadyReason is the reason of a pool's Ready condition.
func poolReadyReason(key types.NamespacedName) string {
	GinkgoHelper()
	if c := meta.FindStatusCondition(getPool(key).Status.Conditions, sandboxv1.ConditionReady); c != nil {
		return c.Reason
	}
	return ""
}
