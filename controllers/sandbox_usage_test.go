package controllers_test

import (
	"context"
	"fmt"
	"math"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
	"github.com/getsentry/sandbox-controller/internal/vercel"
	"github.com/getsentry/sandbox-controller/localstack/emulator"
)

// status.usage: what a Sandbox used, read from the answers the controller
// gets anyway, counted once across pauses and manager restarts, and equal to
// what the emulator itself booked.
var _ = Describe("Sandbox usage", func() {
	ctx := context.Background()
	var ns string
	BeforeEach(func() { ns = newNamespace() })

	// busyLoop counts in the shell itself: a second or so of CPU.
	const busyLoop = `i=0; while [ $i -lt 600000 ]; do i=$((i+1)); done`
	setup := func(script string) []sandboxv1.SetupCommand {
		return []sandboxv1.SetupCommand{{Name: "work", Command: "sh", Args: []string{"-c", script}}}
	}
	usageOf := func(key types.NamespacedName) sandboxv1.SandboxUsage {
		GinkgoHelper()
		u := getSandbox(key).Status.Usage
		Expect(u).NotTo(BeNil(), "status.usage of %s", key.Name)
		Expect(u.Total).NotTo(BeNil(), "status.usage.total of %s", key.Name)
		return *u
	}
	// stopAndCount pauses the Sandbox and returns its usage once the
	// stopped session's final figures are in it.
	stopAndCount := func(key types.NamespacedName) sandboxv1.SandboxUsage {
		GinkgoHelper()
		session := getSandbox(key).Status.SessionID
		setState(key, sandboxv1.SandboxStateStopped)
		Eventually(readyCondition(key)).Should(HaveField("Reason", sandboxv1.ReasonStopped))
		Eventually(func(g Gomega) {
			u := getSandbox(key).Status.Usage
			g.Expect(u).NotTo(BeNil())
			g.Expect(u.Current).NotTo(BeNil())
			g.Expect(u.Current.SessionID).To(Equal(session))
			g.Expect(u.Current.EndedAt).NotTo(BeNil(), "the stopped session's final figures")
		}).Should(Succeed())
		return usageOf(key)
	}
	// ledgerOf is the emulator's own booking of the Vercel sandboxes of
	// the Sandboxes in namespace ns.
	ledgerOf := func(ns string) (operator, ledger sandboxv1.UsageAmounts) {
		GinkgoHelper()
		list := &sandboxv1.SandboxList{}
		Expect(k8sClient.List(ctx, list, client.InNamespace(ns))).To(Succeed())
		book := emu.Ledger()
		for _, sbx := range list.Items {
			if u := sbx.Status.Usage; u != nil && u.Total != nil {
				operator = addAmounts(operator, *u.Total)
			}
			for _, p := range book.Projects {
				ledger = addLedger(ledger, p.Sandboxes[sbx.Status.VercelName])
			}
		}
		return operator, ledger
	}

	It("counts a CPU-busy command's active CPU and not a sleeping one's, once across a pause, resume and manager restart, as the emulator booked it", func() {
		if emu.ExecMode() == "none" {
			Skip("exec mode none runs no process: CPU is tested in localstack/emulator and sandboxruntime")
		}
		busy := types.NamespacedName{Namespace: ns, Name: "busy"}
		idle := types.NamespacedName{Namespace: ns, Name: "idle"}
		newSandbox(ns, busy.Name, sandboxv1.SandboxSpec{Source: runtimeSource("node24"), Setup: setup(busyLoop)})
		newSandbox(ns, idle.Name, sandboxv1.SandboxSpec{Source: runtimeSource("node24"), Setup: setup("sleep 2")})
		waitReady(busy)
		waitReady(idle)

		By("naming the running session in current, with no figures until Vercel reports them at the stop")
		running := getSandbox(busy).Status
		Expect(running.Usage).NotTo(BeNil())
		Expect(running.Usage.Current).NotTo(BeNil())
		Expect(running.Usage.Current.SessionID).To(Equal(running.SessionID))
		Expect(running.Usage.Current.EndedAt).To(BeNil())
		Expect(running.Usage.Total).To(BeNil())

		By("pausing both: the busy one used CPU, the sleeping one almost none")
		first := stopAndCount(busy)
		sleeper := stopAndCount(idle)
		GinkgoWriter.Printf("busy: %+v\nsleep: %+v\n", *first.Total, *sleeper.Total)
		Expect(first.Total.ActiveCPUMillis).To(BeNumerically(">=", 200), "a busy loop of about a second of CPU")
		Expect(sleeper.Total.ActiveCPUMillis).To(BeNumerically("<", 100), "sleep 2 uses no CPU")
		Expect(sleeper.Total.SessionMillis).To(BeNumerically(">=", 2000), "but its session ran through the sleep")
		Expect(first.Total.ActiveCPUMillis).To(Equal(first.Current.ActiveCPUMillis), "one session so far")

		By("resuming, restarting the manager while the session runs, and pausing again")
		setState(busy, sandboxv1.SandboxStateRunning)
		Eventually(func() string { return getSandbox(busy).Status.SessionID }).ShouldNot(Equal(first.Current.SessionID))
		session := waitReady(busy).Status.SessionID
		// Setup does not run again on a resume (the filesystem kept its
		// result): a user's command keeps this session busy.
		cmd, err := vc.RunCommand(ctx, session, vercel.RunCommandRequest{Command: "sh", Args: []string{"-c", busyLoop}})
		Expect(err).NotTo(HaveOccurred())
		lctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		_, _, err = vc.ReadAllLogs(lctx, session, cmd.ID)
		Expect(err).NotTo(HaveOccurred())
		restartManager()
		second := stopAndCount(busy)
		Expect(second.Total.ActiveCPUMillis).To(Equal(first.Total.ActiveCPUMillis+second.Current.ActiveCPUMillis),
			"the first session counted once, the second added: %+v then %+v", *first.Total, *second.Total)
		Expect(second.Total.SessionMillis).To(Equal(first.Total.SessionMillis + second.Current.SessionMillis))
		Expect(second.Total.MemoryMBMillis).To(Equal(first.Total.MemoryMBMillis + second.Current.MemoryMBMillis))
		Expect(second.Current.ActiveCPUMillis).To(BeNumerically(">=", 200), "the resumed session ran the busy loop")

		By("a restart while stopped changes nothing")
		restartManager()
		Consistently(func() sandboxv1.UsageAmounts { return *usageOf(busy).Total }, 2*pollInterval).Should(Equal(*second.Total))

		By("attributing to the namespace what the emulator booked, within 1 %")
		operator, ledger := ledgerOf(ns)
		GinkgoWriter.Printf("namespace %s: operator %+v, emulator ledger %+v\n", ns, operator, ledger)
		Expect(ledger.SessionMillis).To(BeNumerically(">", 0))
		for _, f := range []struct {
			name        string
			got, booked int64
		}{
			{"activeCPUMillis", operator.ActiveCPUMillis, ledger.ActiveCPUMillis},
			{"sessionMillis", operator.SessionMillis, ledger.SessionMillis},
			{"memoryMBMillis", operator.MemoryMBMillis, ledger.MemoryMBMillis},
			{"egressBytes", operator.EgressBytes, ledger.EgressBytes},
			{"ingressBytes", operator.IngressBytes, ledger.IngressBytes},
		} {
			Expect(math.Abs(float64(f.got-f.booked))).To(BeNumerically("<=", 0.01*float64(f.booked)),
				"%s: the operator attributes %d, the emulator booked %d", f.name, f.got, f.booked)
		}
	})
})

// A recipe SandboxSnapshot reports its builder's usage and its own storage;
// a SandboxFork sums its children's.
var _ = Describe("SandboxSnapshot and SandboxFork usage", func() {
	ctx := context.Background()
	var ns string
	BeforeEach(func() { ns = newNamespace() })
	const busyLoop = `i=0; while [ $i -lt 600000 ]; do i=$((i+1)); done`

	It("counts a recipe build's CPU and the snapshot's bytes, and sums the usage of a fork's children", func() {
		if emu.ExecMode() == "none" {
			Skip("exec mode none runs no process")
		}
		rt := sandboxv1.Runtime("node24")
		key := types.NamespacedName{Namespace: ns, Name: "built"}
		newSnapshot(ns, key.Name, sandboxv1.SandboxSnapshotSpec{Source: sandboxv1.SandboxSnapshotSource{Recipe: &sandboxv1.SnapshotRecipe{
			Runtime: &rt,
			Setup:   []sandboxv1.RecipeCommand{{Name: "work", Command: "sh", Args: []string{"-c", busyLoop + "; echo done > /vercel/sandbox/out.txt"}}},
		}}})
		snap := waitSnapshotReady(key, 90*time.Second)
		u := snap.Status.Usage
		Expect(u).NotTo(BeNil())
		GinkgoWriter.Printf("snapshot usage: %+v, %d bytes\n", *u.Total, u.SnapshotBytes)
		Expect(u.Total).NotTo(BeNil())
		Expect(u.Total.ActiveCPUMillis).To(BeNumerically(">=", 200), "the builder ran a busy loop")
		Expect(u.Total.SessionMillis).To(BeNumerically(">", 0))
		Expect(u.Current).NotTo(BeNil())
		Expect(u.Current.EndedAt).NotTo(BeNil(), "the capture ended the builder's session")
		Expect(u.SnapshotBytes).To(Equal(snap.Status.SizeBytes))
		Expect(u.SnapshotBytes).To(BeNumerically(">", 0))

		By("forking two children from it and pausing them")
		Expect(k8sClient.Create(ctx, &sandboxv1.SandboxFork{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "pair"},
			Spec: sandboxv1.SandboxForkSpec{
				Source:   sandboxv1.SandboxForkSource{SnapshotRef: &sandboxv1.LocalObjectReference{Name: key.Name}},
				Replicas: ptr.To[int32](2),
				Template: sandboxv1.SandboxForkTemplate{Inherit: sandboxv1.InheritNone},
			},
		})).To(Succeed())
		var kids []types.NamespacedName
		for i := range 2 {
			kid := types.NamespacedName{Namespace: ns, Name: fmt.Sprintf("pair-%d", i)}
			Eventually(func() error { return k8sClient.Get(ctx, kid, &sandboxv1.Sandbox{}) }).Should(Succeed())
			waitReady(kid)
			kids = append(kids, kid)
		}
		for _, kid := range kids {
			setState(kid, sandboxv1.SandboxStateStopped)
		}
		want := func(g Gomega) sandboxv1.UsageAmounts {
			var sum sandboxv1.UsageAmounts
			for _, kid := range kids {
				c := &sandboxv1.Sandbox{}
				g.Expect(k8sClient.Get(ctx, kid, c)).To(Succeed())
				g.Expect(c.Status.Usage).NotTo(BeNil())
				g.Expect(c.Status.Usage.Total).NotTo(BeNil(), "%s stopped", kid.Name)
				sum = addAmounts(sum, *c.Status.Usage.Total)
			}
			return sum
		}
		Eventually(func(g Gomega) {
			sum := want(g)
			f := &sandboxv1.SandboxFork{}
			g.Expect(k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: "pair"}, f)).To(Succeed())
			g.Expect(f.Status.Usage).NotTo(BeNil())
			g.Expect(f.Status.Usage.Total).NotTo(BeNil())
			g.Expect(*f.Status.Usage.Total).To(Equal(sum))
			g.Expect(sum.SessionMillis).To(BeNumerically(">", 0))
			g.Expect(f.Status.Usage.Current).To(BeNil(), "a fork has no session of its own")
		}).Should(Succeed())
	})
})

func addAmounts(a, b sandboxv1.UsageAmounts) sandboxv1.UsageAmounts {
	a.ActiveCPUMillis += b.ActiveCPUMillis
	a.SessionMillis += b.SessionMillis
	a.MemoryMBMillis += b.MemoryMBMillis
	a.EgressBytes += b.EgressBytes
	a.IngressBytes += b.IngressBytes
	return a
}

func addLedger(a sandboxv1.UsageAmounts, e emulator.LedgerEntry) sandboxv1.UsageAmounts {
	return addAmounts(a, sandboxv1.UsageAmounts{ActiveCPUMillis: e.ActiveCPUMs, SessionMillis: e.SessionMs,
		MemoryMBMillis: e.MemoryMBMs, EgressBytes: e.EgressBytes, IngressBytes: e.IngressBytes})
}
