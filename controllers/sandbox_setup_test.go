package controllers_test

import (
	"context"
	"fmt"
	"slices"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
	"github.com/getsentry/sandbox-controller/internal/vercel"
)

// Setup gates Ready on every path a session can take: a resume after a pause,
// a wake after going idle, a manager restart in the middle of setup, and a
// setup step that runs longer than the idle window.
var _ = Describe("Setup gates Ready", func() {
	ctx := context.Background()
	var ns string
	BeforeEach(func() { ns = newNamespace() })

	const setupLog = "/vercel/sandbox/setup.log"
	readLog := func(session string) string {
		GinkgoHelper()
		data, err := vc.ReadFile(ctx, session, setupLog, "")
		Expect(err).NotTo(HaveOccurred())
		return string(data)
	}
	step := func(name, script string) sandboxv1.SetupCommand {
		return sandboxv1.SetupCommand{Name: name, Command: "sh", Args: []string{"-c", script}}
	}
	// stayNotReady checks that a Sandbox whose setup failed does not become
	// Ready in its new session, and still says why.
	stayNotReady := func(key types.NamespacedName) {
		GinkgoHelper()
		Consistently(readyCondition(key), 3*pollInterval).Should(HaveField("Status", metav1.ConditionFalse))
		Expect(readyCondition(key)(Default)).To(And(HaveField("Reason", sandboxv1.ReasonSetupFailed),
			HaveField("Message", ContainSubstring("step 1 (install)"))))
		Expect(getSandbox(key).Status.Phase).To(Equal(sandboxv1.SandboxFailed))
	}

	It("tells its story in events: setup started, setup succeeded, Ready", func() {
		sbx := newSandbox(ns, "story", sandboxv1.SandboxSpec{
			Source: runtimeSource("node24"),
			Setup:  []sandboxv1.SetupCommand{step("install", "true"), step("build", "true")},
		})
		key := types.NamespacedName{Namespace: ns, Name: sbx.Name}
		got := waitReady(key)
		expectEvent(key, "Normal SetupStarted: Started setup step 1 (install)")
		expectEvent(key, fmt.Sprintf("Normal SetupSucceeded: Setup succeeded: 2 command(s) exited 0 in session %s", got.Status.SessionID))
		expectEvent(key, "Normal Ready: ")
	})

	It("keeps a Sandbox whose setup failed not Ready after a pause and resume, and runs setup again when spec.setup changes", func() {
		key := types.NamespacedName{Namespace: ns, Name: "failing"}
		newSandbox(ns, key.Name, sandboxv1.SandboxSpec{
			Source: runtimeSource("node24"),
			Setup:  []sandboxv1.SetupCommand{step("install", "echo attempt >> "+setupLog+"; exit 3")},
		})
		Eventually(readyCondition(key)).Should(And(Not(BeNil()), HaveField("Reason", sandboxv1.ReasonSetupFailed)))
		first := getSandbox(key).Status.SessionID

		By("pausing and resuming it")
		setState(key, sandboxv1.SandboxStateStopped)
		Eventually(readyCondition(key)).Should(HaveField("Reason", sandboxv1.ReasonStopped))
		setState(key, sandboxv1.SandboxStateRunning)
		Eventually(func() string { return getSandbox(key).Status.SessionID }).ShouldNot(Equal(first))
		stayNotReady(key)
		Expect(readLog(getSandbox(key).Status.SessionID)).To(Equal("attempt\n"), "a failed setup is not retried by a resume")

		By("fixing spec.setup")
		sbx := getSandbox(key)
		patch := client.MergeFrom(sbx.DeepCopy())
		sbx.Spec.Setup = []sandboxv1.SetupCommand{step("install", "echo fixed >> "+setupLog)}
		Expect(k8sClient.Patch(ctx, sbx, patch)).To(Succeed())
		sbx = waitReady(key)
		Expect(readLog(sbx.Status.SessionID)).To(Equal("attempt\nfixed\n"))
		Expect(sbx.Status.Setup).To(And(HaveField("State", sandboxv1.SetupSucceeded), HaveField("Completed", int32(1))))
	})

	It("keeps a Sandbox whose setup failed not Ready when a heartbeat wakes it after its session went idle", func() {
		key := types.NamespacedName{Namespace: ns, Name: "failing-idle"}
		newSandbox(ns, key.Name, sandboxv1.SandboxSpec{
			Source:         runtimeSource("node24"),
			TimeoutSeconds: ptr.To[int64](2),
			Setup:          []sandboxv1.SetupCommand{step("install", "exit 3")},
		})
		Eventually(readyCondition(key)).Should(And(Not(BeNil()), HaveField("Reason", sandboxv1.ReasonSetupFailed)))
		first := getSandbox(key).Status.SessionID
		Eventually(func() vercel.SessionStatus { return sessionStatus(first) }, 15*time.Second).Should(Equal(vercel.SessionStopped))

		By("waking it with a heartbeat once its session has gone idle")
		heartbeat(key, time.Now())
		Eventually(func() string { return getSandbox(key).Status.SessionID }).ShouldNot(Equal(first))
		stayNotReady(key)
	})

	It("keeps the session alive through a setup step longer than timeoutSeconds, and does not run setup again when it wakes from Idle", func() {
		key := types.NamespacedName{Namespace: ns, Name: "slow"}
		newSandbox(ns, key.Name, sandboxv1.SandboxSpec{
			Source:         runtimeSource("node24"),
			TimeoutSeconds: ptr.To[int64](3),
			Setup:          []sandboxv1.SetupCommand{step("install", "sleep 8; echo ran >> "+setupLog)},
		})
		Eventually(func() sandboxv1.SandboxPhase { return getSandbox(key).Status.Phase }).Should(Equal(sandboxv1.SandboxSettingUp))
		first := getSandbox(key).Status.SessionID
		sbx := waitReady(key)
		Expect(sbx.Status.SessionID).To(Equal(first), "the step ran to its end in the session it started in")
		Expect(readLog(first)).To(Equal("ran\n"))
		Expect(eventsFor(key)).NotTo(ContainElement(ContainSubstring(sandboxv1.ReasonIdleTimeout)))

		By("going Idle after setup, then waking with a heartbeat")
		Eventually(readyCondition(key), 20*time.Second).Should(HaveField("Reason", sandboxv1.ReasonIdleTimeout))
		heartbeat(key, time.Now())
		Eventually(func() string { return getSandbox(key).Status.SessionID }).ShouldNot(Equal(first))
		sbx = waitReady(key)
		Expect(readLog(sbx.Status.SessionID)).To(Equal("ran\n"), "setup succeeded on this filesystem: it does not run again")
	})

	It("finds its own setup command after a restart that lost its record, and never takes a client's command for one", func() {
		key := types.NamespacedName{Namespace: ns, Name: "restart"}
		secondScript := "sleep 4; echo two >> " + setupLog
		newSandbox(ns, key.Name, sandboxv1.SandboxSpec{
			Source: runtimeSource("node24"),
			Setup: []sandboxv1.SetupCommand{
				step("one", "sleep 3; echo one >> "+setupLog),
				step("two", secondScript),
			},
		})
		setupOf := func() *sandboxv1.SetupStatus { return getSandbox(key).Status.Setup }

		By("running a client command while step 1 runs")
		Eventually(setupOf).Should(And(Not(BeNil()), HaveField("Completed", int32(0)), HaveField("CommandID", Not(BeEmpty()))))
		sbx := getSandbox(key)
		session, beforeStep2 := sbx.Status.SessionID, sbx.Status.Setup.DeepCopy()
		_, err := vc.RunCommand(ctx, session, vercel.RunCommandRequest{Command: "sh", Args: []string{"-c", "echo client >> " + setupLog}, Env: map[string]string{}})
		Expect(err).NotTo(HaveOccurred())

		By("restarting the manager as if the write that recorded step 2 was lost")
		Eventually(setupOf, 15*time.Second).Should(And(HaveField("Completed", int32(1)), HaveField("CommandID", Not(BeEmpty()))))
		stopManager()
		sbx = getSandbox(key)
		patch := client.MergeFrom(sbx.DeepCopy())
		sbx.Status.Setup = beforeStep2
		Expect(k8sClient.Status().Patch(ctx, sbx, patch)).To(Succeed())
		startManager(k8sClient.Scheme())

		sbx = waitReady(key)
		Expect(sbx.Status.SessionID).To(Equal(session))
		Expect(readLog(session)).To(Equal("client\none\ntwo\n"), "Ready waits for step 2 itself")
		cmds, err := vc.ListCommands(ctx, session)
		Expect(err).NotTo(HaveOccurred())
		started := 0
		for _, c := range cmds {
			if slices.Contains(c.Args, secondScript) {
				started++
			}
		}
		Expect(started).To(Equal(1), "step 2 was found again, not started twice")
	})
})
