package controllers_test

import (
	"context"
	"net/http/httptest"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
	"github.com/getsentry/sandbox-controller/internal/metrics"
)

// cpuHour is one hour of active CPU in status.usage's unit: $0.128 at
// Vercel's list price.
const cpuHour = int64(3_600_000)

// The budget specs drive usage through status.usage.total of the Sandboxes,
// as the Sandbox controller records it from Vercel's answers (setUsage).
var _ = Describe("SandboxQuota budgets", func() {
	ctx := context.Background()

	It("warn at 80 % (condition, event, webhook), refuse new starts at the limit, and let them start when the limit is raised", func() {
		ns := newNamespace()
		hook := &webhook{key: []byte("budget-namespace-signing-key-0123456789")}
		srv := httptest.NewServer(hook)
		DeferCleanup(srv.Close)
		configureNotifications(ns, srv.URL, hook.key)
		q := newBudgetQuota(ns, "team", sandboxv1.SandboxBudget{Name: "monthly", Limit: "1", WarnAtPercent: ptr.To[int32](80),
			Window:     sandboxv1.BudgetWindow{CalendarMonth: &sandboxv1.CalendarMonthWindow{TimeZone: "Europe/Vienna"}},
			Projection: sandboxv1.BudgetProjectNone})
		a := types.NamespacedName{Namespace: ns, Name: "a"}
		newSandbox(ns, a.Name, sandboxv1.SandboxSpec{Source: runtimeSource("node24")})
		waitReady(a)

		By("6.5 active CPU hours and one creation ($0.8320006 of $1) warn")
		setUsage(a, sandboxv1.UsageAmounts{ActiveCPUMillis: 6*cpuHour + cpuHour/2})
		Eventually(budget(q, "monthly")).Should(And(HaveField("Action", sandboxv1.BudgetActionWarn), HaveField("Spent", sandboxv1.Decimal("0.832001")),
			HaveField("Percent", BeEquivalentTo(83)), HaveField("Currency", "USD")))
		Eventually(quotaCondition(q, sandboxv1.ConditionBudgetWarning)).Should(HaveField("Status", metav1.ConditionTrue))
		expectEvent(client.ObjectKeyFromObject(q), "Warning BudgetWarning: monthly: Spent 0.832001 of 1 Money: 83 % (warning at 80 %)")
		Eventually(func() []receivedEvent { return hook.received("io.sentry.sandbox.sandboxquota.budgetwarning", q.Name) }, 5*time.Second).Should(HaveLen(1))
		Expect(testutil.ToFloat64(metrics.BudgetSpent.WithLabelValues(ns, q.Name, "monthly", "Money"))).To(Equal(0.832001))
		Expect(testutil.ToFloat64(metrics.UsageCost.WithLabelValues(ns, "", "USD"))).To(Equal(0.832))

		By("a warning refuses nothing")
		b := types.NamespacedName{Namespace: ns, Name: "b"}
		newSandbox(ns, b.Name, sandboxv1.SandboxSpec{Source: runtimeSource("node24")})
		waitReady(b)

		By("8 hours ($1.024) refuse the next start, stop nothing, and announce it")
		setUsage(a, sandboxv1.UsageAmounts{ActiveCPUMillis: 8 * cpuHour})
		Eventually(budget(q, "monthly")).Should(HaveField("Action", sandboxv1.BudgetActionRefuse))
		Eventually(quotaCondition(q, sandboxv1.ConditionBudgetExceeded)).Should(HaveField("Status", metav1.ConditionTrue))
		Eventually(func() []receivedEvent { return hook.received("io.sentry.sandbox.sandboxquota.budgetexceeded", q.Name) }, 5*time.Second).Should(HaveLen(1))
		c := types.NamespacedName{Namespace: ns, Name: "c"}
		newSandbox(ns, c.Name, sandboxv1.SandboxSpec{Source: runtimeSource("node24")})
		Eventually(readyCondition(c)).Should(And(HaveField("Reason", sandboxv1.ReasonQuotaExceeded),
			HaveField("Message", ContainSubstring("SandboxQuota team: budget monthly is spent"))))
		Consistently(func() int { return runningSessions(ns) }, 3*time.Second).Should(Equal(2), "a refused start reached Vercel, or a running one was stopped")
		Expect(getSandbox(a).Spec.State).NotTo(Equal(sandboxv1.SandboxStateStopped))

		By("raising the limit lets the waiter start by itself")
		Eventually(func() error {
			cur := &sandboxv1.SandboxQuota{}
			if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(q), cur); err != nil {
				return err
			}
			cur.Spec.Budgets[0].Limit = "5"
			return k8sClient.Update(ctx, cur)
		}).Should(Succeed())
		waitReady(c)
		Eventually(quotaCondition(q, sandboxv1.ConditionBudgetExceeded)).Should(HaveField("Status", metav1.ConditionFalse))
	})

	It("stop the running Sandboxes at a hard limit with enforcement Stop", func() {
		ns := newNamespace()
		q := newBudgetQuota(ns, "hard", sandboxv1.SandboxBudget{Name: "day", Limit: "0.5", Enforcement: sandboxv1.BudgetStop,
			Window: sandboxv1.BudgetWindow{RollingSeconds: ptr.To[int64](86400)}, Projection: sandboxv1.BudgetProjectNone})
		a := types.NamespacedName{Namespace: ns, Name: "a"}
		newSandbox(ns, a.Name, sandboxv1.SandboxSpec{Source: runtimeSource("node24")})
		waitReady(a)
		Expect(runningSessions(ns)).To(Equal(1))
		setUsage(a, sandboxv1.UsageAmounts{ActiveCPUMillis: 4 * cpuHour})
		Eventually(budget(q, "day")).Should(HaveField("Action", sandboxv1.BudgetActionStop))
		Eventually(func() sandboxv1.SandboxState { return getSandbox(a).Spec.State }).Should(Equal(sandboxv1.SandboxStateStopped))
		expectEvent(a, "Warning BudgetStopped: SandboxQuota hard: a budget with enforcement Stop is spent")
		Eventually(func() int { return runningSessions(ns) }).Should(BeZero(), "the session still runs in the emulator")
	})

	It("refuse before the limit when the burn rate would cross it before the next count", func() {
		ns := newNamespace()
		q := newBudgetQuota(ns, "burn", sandboxv1.SandboxBudget{Name: "monthly", Limit: "1",
			Window: sandboxv1.BudgetWindow{CalendarMonth: &sandboxv1.CalendarMonthWindow{}}})
		a := types.NamespacedName{Namespace: ns, Name: "a"}
		newSandbox(ns, a.Name, sandboxv1.SandboxSpec{Source: runtimeSource("node24")})
		waitReady(a)
		// $0.896 in one poll interval: the next one would cross $1.
		setUsage(a, sandboxv1.UsageAmounts{ActiveCPUMillis: 7 * cpuHour})
		Eventually(budget(q, "monthly"), 10*time.Second, 100*time.Millisecond).Should(And(
			HaveField("Action", sandboxv1.BudgetActionRefuse), HaveField("Spent", sandboxv1.Decimal("0.896001")),
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

// newBudgetQuota creates a SandboxQuota with one budget and waits for its
// first count: a budget counts from then.
func newBudgetQuota(ns, name string, b sandboxv1.SandboxBudget) *sandboxv1.SandboxQuota {
	GinkgoHelper()
	q := &sandboxv1.SandboxQuota{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: sandboxv1.SandboxQuotaSpec{Budgets: []sandboxv1.SandboxBudget{b}}}
	Expect(k8sClient.Create(context.Background(), q)).To(Succeed())
	Eventually(budget(q, b.Name)).Should(HaveField("CountedAt", Not(BeNil())))
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

// setUsage records total as the Sandbox's lifetime usage, with its current
// session, as the Sandbox controller records what Vercel reported.
func setUsage(key types.NamespacedName, total sandboxv1.UsageAmounts) {
	GinkgoHelper()
	Eventually(func() error {
		sbx := getSandbox(key)
		patch := client.MergeFrom(sbx.DeepCopy())
		sbx.Status.Usage = &sandboxv1.SandboxUsage{
			Current:    &sandboxv1.SessionUsage{SessionID: sbx.Status.SessionID},
			Total:      &total,
			ObservedAt: &metav1.Time{Time: time.Now()},
		}
		return k8sClient.Status().Patch(context.Background(), sbx, patch)
	}).Should(Succeed())
}
