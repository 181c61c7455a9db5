package controllers_test

import (
	"context"
	"fmt"
	"net"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
	"github.com/getsentry/sandbox-controller/internal/vercel"
)

// spec.readinessProbe: Ready waits for it after setup, and a probe that keeps
// failing after Ready turns Ready False with its reason. The probes reach a
// server a command started in the sandbox through the route the emulator
// serves, or run a command in the session.
var _ = Describe("Readiness probe", func() {
	ctx := context.Background()
	var ns string
	BeforeEach(func() { ns = newNamespace() })

	// freePort is a port nothing listens on now. Sessions share the host's
	// loopback in the emulator, so each spec takes its own.
	freePort := func() int32 {
		GinkgoHelper()
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		Expect(err).NotTo(HaveOccurred())
		defer ln.Close()
		return int32(ln.Addr().(*net.TCPAddr).Port)
	}
	// run starts a command in the Sandbox's session, detached.
	run := func(session, script string) string {
		GinkgoHelper()
		cmd, err := vc.RunCommand(ctx, session, vercel.RunCommandRequest{Command: "sh", Args: []string{"-c", script}})
		Expect(err).NotTo(HaveOccurred())
		return cmd.ID
	}
	readyReason := func(key types.NamespacedName) func(Gomega) string {
		return func(g Gomega) string {
			c := readyCondition(key)(g)
			g.Expect(c).NotTo(BeNil())
			return c.Reason
		}
	}

	It("keeps Ready False until the HTTP server in the sandbox answers on its route, and turns it False after failureThreshold failures", func() {
		port := freePort()
		key := types.NamespacedName{Namespace: ns, Name: "web"}
		newSandbox(ns, key.Name, sandboxv1.SandboxSpec{
			Source: runtimeSource("node24"),
			Ports:  []int32{port},
			ReadinessProbe: &sandboxv1.ReadinessProbe{
				HTTPGet:          &sandboxv1.HTTPGetProbe{Port: port, Path: "/"},
				PeriodSeconds:    ptr.To[int32](1),
				TimeoutSeconds:   ptr.To[int32](1),
				FailureThreshold: ptr.To[int32](2),
			},
		})
		Eventually(readyReason(key)).Should(Equal(sandboxv1.ReasonProbeNotReady))
		c := readyCondition(key)(Default)
		Expect(c.Status).To(Equal(metav1.ConditionFalse))
		Expect(c.Message).To(ContainSubstring("502 Bad Gateway"), "nothing serves the port yet")
		sbx := getSandbox(key)
		Expect(sbx.Status.Phase).To(Equal(sandboxv1.SandboxRunning))
		By("probing from status between polls: no Vercel request per probe")
		gets := func() int { return len(recorder.requests("GET", "/sandboxes/"+sbx.Status.VercelName)) }
		before := gets()
		Consistently(readyCondition(key), 6*time.Second).Should(HaveField("Status", metav1.ConditionFalse))
		Expect(gets()-before).To(BeNumerically("<=", 4), "six probes in 6 s; polls every %s", pollInterval)

		By("starting an HTTP server in the sandbox, after a delay")
		server := run(sbx.Status.SessionID, fmt.Sprintf("sleep 2; exec python3 -m http.server %d --bind 127.0.0.1", port))
		Eventually(readyCondition(key), 20*time.Second).Should(And(HaveField("Status", metav1.ConditionTrue), HaveField("Reason", sandboxv1.ReasonRunning)))

		By("killing the server")
		_, err := vc.KillCommand(ctx, sbx.Status.SessionID, server, 9)
		Expect(err).NotTo(HaveOccurred())
		Eventually(readyReason(key), 15*time.Second).Should(Equal(sandboxv1.ReasonProbeFailed))
		c = readyCondition(key)(Default)
		Expect(c.Status).To(Equal(metav1.ConditionFalse))
		Expect(c.Message).To(And(ContainSubstring("failed 2 times in a row"), ContainSubstring("502 Bad Gateway")))
		expectEvent(key, "Warning ProbeFailed: Readiness probe failed 2 times in a row")
		Expect(getSandbox(key).Status.SessionID).To(Equal(sbx.Status.SessionID), "a failing probe does not touch the session")

		By("starting it again")
		run(sbx.Status.SessionID, fmt.Sprintf("exec python3 -m http.server %d --bind 127.0.0.1", port))
		Eventually(readyCondition(key), 20*time.Second).Should(HaveField("Status", metav1.ConditionTrue))
		expectEvent(key, "Normal ProbePassed")
	})

	It("runs an exec probe in the session, with its exit code and output, scrubbed of Secret values, in Ready", func() {
		const secret = "sk_probe_VerySecretValue7"
		Expect(k8sClient.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "api"},
			Data:       map[string][]byte{"key": []byte(secret)},
		})).To(Succeed())
		key := types.NamespacedName{Namespace: ns, Name: "exec"}
		newSandbox(ns, key.Name, sandboxv1.SandboxSpec{
			Source: runtimeSource("node24"),
			Env:    []sandboxv1.EnvVar{{Name: "API_KEY", ValueFrom: &sandboxv1.EnvVarSource{SecretKeyRef: sandboxv1.SecretKeySelector{Name: "api", Key: "key"}}}},
			Setup:  []sandboxv1.SetupCommand{{Name: "install", Command: "sh", Args: []string{"-c", "sleep 1"}}},
			ReadinessProbe: &sandboxv1.ReadinessProbe{
				Exec:             &sandboxv1.ExecProbe{Command: "sh", Args: []string{"-c", `echo "key=$API_KEY"; test -f /vercel/sandbox/ready`}},
				PeriodSeconds:    ptr.To[int32](1),
				FailureThreshold: ptr.To[int32](2),
			},
		})
		// Ready says "Waiting for the readiness probe" while the first probe
		// command runs (detached), then why it failed.
		Eventually(readyCondition(key)).Should(And(Not(BeNil()), HaveField("Reason", sandboxv1.ReasonProbeNotReady),
			HaveField("Message", ContainSubstring("exited with code 1"))))
		c := readyCondition(key)(Default)
		Expect(c.Message).To(And(ContainSubstring("exited with code 1"), ContainSubstring("key=[redacted]")))
		Expect(c.Message).NotTo(ContainSubstring(secret))
		sbx := getSandbox(key)
		Expect(sbx.Status.Setup).To(HaveField("State", sandboxv1.SetupSucceeded), "the probe runs after setup")

		By("running one command per period")
		cmds := func() int { return len(recorder.requests("POST", "/sessions/"+sbx.Status.SessionID+"/cmd")) }
		before := cmds()
		time.Sleep(4 * time.Second)
		Expect(cmds()-before).To(And(BeNumerically(">=", 2), BeNumerically("<=", 5)), "periodSeconds 1 for 4 s")

		By("creating the file the probe tests")
		run(sbx.Status.SessionID, "touch /vercel/sandbox/ready")
		Eventually(readyCondition(key), 15*time.Second).Should(HaveField("Status", metav1.ConditionTrue))

		By("removing it")
		run(sbx.Status.SessionID, "rm /vercel/sandbox/ready")
		Eventually(readyReason(key), 15*time.Second).Should(Equal(sandboxv1.ReasonProbeFailed))
		Expect(readyCondition(key)(Default).Message).To(And(ContainSubstring("failed 2 times in a row"), ContainSubstring("exited with code 1")))
		for _, e := range eventsFor(key) {
			Expect(e).NotTo(ContainSubstring(secret))
		}
		Expect(logs.String()).NotTo(ContainSubstring(secret))
	})

	It("makes a Ready Sandbox wait for a probe added to it", func() {
		key := types.NamespacedName{Namespace: ns, Name: "added"}
		newSandbox(ns, key.Name, sandboxv1.SandboxSpec{Source: runtimeSource("node24")})
		sbx := waitReady(key)
		patch := client.MergeFrom(sbx.DeepCopy())
		sbx.Spec.ReadinessProbe = &sandboxv1.ReadinessProbe{
			Exec:          &sandboxv1.ExecProbe{Command: "test", Args: []string{"-f", "/vercel/sandbox/ready"}},
			PeriodSeconds: ptr.To[int32](1),
		}
		Expect(k8sClient.Patch(ctx, sbx, patch)).To(Succeed())
		Eventually(readyReason(key)).Should(Equal(sandboxv1.ReasonProbeNotReady))
		run(sbx.Status.SessionID, "touch /vercel/sandbox/ready")
		Eventually(readyCondition(key), 15*time.Second).Should(HaveField("Status", metav1.ConditionTrue))
	})

	It("refuses a probe with both httpGet and exec, and an httpGet port missing from spec.ports", func() {
		probe := func(p sandboxv1.ReadinessProbe) error {
			return k8sClient.Create(ctx, &sandboxv1.Sandbox{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: "bad-"},
				Spec:       sandboxv1.SandboxSpec{Source: runtimeSource("node24"), Ports: []int32{3000}, ReadinessProbe: &p},
			})
		}
		err := probe(sandboxv1.ReadinessProbe{HTTPGet: &sandboxv1.HTTPGetProbe{Port: 3000}, Exec: &sandboxv1.ExecProbe{Command: "true"}})
		Expect(err).To(MatchError(ContainSubstring("exactly one of httpGet or exec")))
		err = probe(sandboxv1.ReadinessProbe{})
		Expect(err).To(MatchError(ContainSubstring("exactly one of httpGet or exec")))
		err = probe(sandboxv1.ReadinessProbe{HTTPGet: &sandboxv1.HTTPGetProbe{Port: 4000}})
		Expect(err).To(MatchError(ContainSubstring("must be one of spec.ports")))
		err = probe(sandboxv1.ReadinessProbe{HTTPGet: &sandboxv1.HTTPGetProbe{Port: 3000, Path: "no-slash"}})
		Expect(err).To(HaveOccurred())
		Expect(strings.Contains(err.Error(), "path")).To(BeTrue(), err.Error())
		Expect(probe(sandboxv1.ReadinessProbe{HTTPGet: &sandboxv1.HTTPGetProbe{Port: 3000, Path: "/healthz"}})).To(Succeed())
	})
})
