package controllers_test

import (
	"context"
	"encoding/json"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
	"github.com/getsentry/sandbox-controller/internal/vercel"
)

// What fork children inherit: the source Sandbox's spec as it was at capture
// time, never the live one, and names of any valid length.
var _ = Describe("SandboxFork inheritance and names", func() {
	ctx := context.Background()
	var ns string
	BeforeEach(func() { ns = newNamespace() })

	getFork := func(name string) *sandboxv1.SandboxFork {
		f := &sandboxv1.SandboxFork{}
		Expect(k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, f)).To(Succeed())
		return f
	}
	// children lists the live children of a fork through the selector it
	// publishes.
	children := func(fork string) []sandboxv1.Sandbox {
		sel, err := metav1.ParseToLabelSelector(getFork(fork).Status.Selector)
		Expect(err).NotTo(HaveOccurred())
		Expect(sel.MatchLabels).NotTo(BeEmpty())
		list := &sandboxv1.SandboxList{}
		Expect(k8sClient.List(ctx, list, client.InNamespace(ns), client.MatchingLabels(sel.MatchLabels))).To(Succeed())
		var out []sandboxv1.Sandbox
		for _, c := range list.Items {
			if c.DeletionTimestamp.IsZero() {
				out = append(out, c)
			}
		}
		return out
	}
	forkReady := func(name string, want int32) {
		GinkgoHelper()
		Eventually(func(g Gomega) {
			f := &sandboxv1.SandboxFork{}
			g.Expect(k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, f)).To(Succeed())
			g.Expect(f.Status.Phase).To(Equal(sandboxv1.ForkReady), "status: %+v", f.Status)
			g.Expect(f.Status.ReadyReplicas).To(Equal(want))
			g.Expect(f.Status.Replicas).To(Equal(want))
		}, 90*time.Second).Should(Succeed())
	}
	scale := func(name string, n int32) {
		f := getFork(name)
		patch := client.MergeFrom(f.DeepCopy())
		f.Spec.Replicas = ptr.To(n)
		Expect(k8sClient.Patch(ctx, f, patch)).To(Succeed())
	}
	newFork := func(name string, source sandboxv1.SandboxForkSource, replicas int32) {
		Expect(k8sClient.Create(ctx, &sandboxv1.SandboxFork{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec:       sandboxv1.SandboxForkSpec{Source: source, Replicas: ptr.To(replicas), KeepSourceRunning: true},
		})).To(Succeed())
	}
	sandboxRef := func(name string) sandboxv1.SandboxForkSource {
		return sandboxv1.SandboxForkSource{SandboxRef: &sandboxv1.LocalObjectReference{Name: name}}
	}
	snapshotRef := func(name string) sandboxv1.SandboxForkSource {
		return sandboxv1.SandboxForkSource{SnapshotRef: &sandboxv1.LocalObjectReference{Name: name}}
	}

	It("gives children created after the source's shutdownTime passed no shutdownTime, and no create/delete loop", func() {
		srcKey := types.NamespacedName{Namespace: ns, Name: "ending"}
		shutdown := metav1.NewTime(time.Now().Add(15 * time.Second).Truncate(time.Second))
		newSandbox(ns, "ending", sandboxv1.SandboxSpec{
			Source:         runtimeSource("node24"),
			ShutdownTime:   &shutdown,
			ShutdownPolicy: sandboxv1.ShutdownStop,
		})
		newFork("ending-fork", sandboxRef("ending"), 1)
		forkReady("ending-fork", 1)
		Expect(time.Now()).To(BeTemporally("<", shutdown.Time), "the capture must precede the shutdown for this spec to mean anything")
		Expect(getSnapshotObj(types.NamespacedName{Namespace: ns, Name: "ending-fork-capture"}).Status.SourceSpec).NotTo(BeNil())
		first := children("ending-fork")
		Expect(first).To(HaveLen(1))

		By("letting the source's shutdownTime pass")
		Eventually(readyCondition(srcKey), 30*time.Second).Should(HaveField("Reason", sandboxv1.ReasonShutdownTime))

		By("scaling up after it")
		scale("ending-fork", 2)
		forkReady("ending-fork", 2)
		// Ready must last: a child with the past shutdownTime would be stopped
		// (or, with shutdownPolicy Delete, deleted and created again).
		Consistently(func(g Gomega) {
			f := getFork("ending-fork")
			g.Expect(f.Status.ReadyReplicas).To(Equal(int32(2)))
			kids := children("ending-fork")
			g.Expect(kids).To(HaveLen(2))
			for _, c := range kids {
				g.Expect(c.Spec.ShutdownTime).To(BeNil(), "child %s", c.Name)
				if c.Name == first[0].Name {
					g.Expect(c.UID).To(Equal(first[0].UID), "child %s was deleted and created again", c.Name)
				}
			}
		}, 3*pollInterval).Should(Succeed())
		created := 0
		for _, e := range eventsFor(types.NamespacedName{Namespace: ns, Name: "ending-fork"}) {
			if strings.Contains(e, "ChildCreated") {
				created++
			}
		}
		Expect(created).To(Equal(2), "one create per child")
	})

	It("gives children the env and network policy frozen at capture after the source changed and was deleted", func() {
		const token = "tok_CanaryForkSecret42"
		Expect(k8sClient.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "creds"},
			Data:       map[string][]byte{"token": []byte(token)},
		})).To(Succeed())
		srcKey := types.NamespacedName{Namespace: ns, Name: "origin"}
		tokenRef := sandboxv1.EnvVar{Name: "TOKEN", ValueFrom: &sandboxv1.EnvVarSource{SecretKeyRef: sandboxv1.SecretKeySelector{Name: "creds", Key: "token"}}}
		newSandbox(ns, "origin", sandboxv1.SandboxSpec{
			Source:         runtimeSource("node24"),
			Ports:          []int32{3000},
			TimeoutSeconds: ptr.To[int64](600),
			Env:            []sandboxv1.EnvVar{{Name: "MODE", Value: ptr.To("fast")}, tokenRef},
			NetworkPolicy:  &sandboxv1.NetworkPolicy{Mode: sandboxv1.NetworkAllowlist, AllowedDomains: []string{"example.com"}},
		})
		waitReady(srcKey)
		newSnapshot(ns, "manual", sandboxv1.SandboxSnapshotSpec{
			Source:            sandboxv1.SandboxSnapshotSource{SandboxRef: &sandboxv1.LocalObjectReference{Name: "origin"}},
			KeepSourceRunning: true,
		})
		waitSnapshotReady(types.NamespacedName{Namespace: ns, Name: "manual"})
		waitReady(srcKey)
		newFork("kids", sandboxRef("origin"), 1)
		forkReady("kids", 1)

		By("changing the source's env and network policy, then deleting it")
		src := getSandbox(srcKey)
		patch := client.MergeFrom(src.DeepCopy())
		src.Spec.Env[0].Value = ptr.To("slow")
		src.Spec.NetworkPolicy = nil
		Expect(k8sClient.Patch(ctx, src, patch)).To(Succeed())
		Expect(k8sClient.Delete(ctx, src)).To(Succeed())
		Eventually(func() bool { return apierrors.IsNotFound(k8sClient.Get(ctx, srcKey, &sandboxv1.Sandbox{})) }, 60*time.Second).Should(BeTrue())

		By("creating children after that: one by scaling the sandboxRef fork, one by forking the standalone capture")
		scale("kids", 2)
		newFork("later", snapshotRef("manual"), 1)
		forkReady("kids", 2)
		forkReady("later", 1)
		for _, c := range append(children("kids"), children("later")...) {
			Expect(c.Spec.Env).To(Equal([]sandboxv1.EnvVar{{Name: "MODE", Value: ptr.To("fast")}, tokenRef}), "child %s", c.Name)
			Expect(c.Spec.NetworkPolicy).To(Equal(&sandboxv1.NetworkPolicy{Mode: sandboxv1.NetworkAllowlist, AllowedDomains: []string{"example.com"}}), "child %s", c.Name)
			Expect(c.Spec.Ports).To(Equal([]int32{3000}))
			Expect(*c.Spec.TimeoutSeconds).To(Equal(int64(600)))
			Expect(c.Spec.Setup).To(BeNil())

			var sent vercel.CreateSandboxRequest
			Expect(json.Unmarshal(lastCreateFor(c.Status.VercelName), &sent)).To(Succeed())
			Expect(sent.Env).To(Equal(map[string]string{"MODE": "fast", "TOKEN": token}), "what Vercel received for %s", c.Name)
			Expect(sent.NetworkPolicy).NotTo(BeNil())
			Expect(sent.NetworkPolicy.Allow).To(Equal(&vercel.NetworkAllow{Domains: []string{"example.com"}}))
		}
		// The frozen spec holds the Secret reference, never its value.
		for _, name := range []string{"manual", "kids-capture"} {
			status, err := json.Marshal(getSnapshotObj(types.NamespacedName{Namespace: ns, Name: name}).Status)
			Expect(err).NotTo(HaveOccurred())
			Expect(string(status)).To(ContainSubstring(`"secretKeyRef"`))
			Expect(string(status)).NotTo(ContainSubstring(token))
		}
	})

	It("refuses a snapshot imported by id, whose source spec is unknown, until inherit is None", func() {
		id := snapshotWithFile("imported.txt", "imported\n")
		newSnapshot(ns, "imported", sandboxv1.SandboxSnapshotSpec{Source: sandboxv1.SandboxSnapshotSource{SnapshotID: &id}})
		newFork("guess", snapshotRef("imported"), 1)
		key := types.NamespacedName{Namespace: ns, Name: "guess"}
		Eventually(func(g Gomega) {
			f := getFork("guess")
			g.Expect(f.Status.Phase).To(Equal(sandboxv1.ForkPending))
			ready := meta.FindStatusCondition(f.Status.Conditions, sandboxv1.ConditionReady)
			g.Expect(ready).NotTo(BeNil())
			g.Expect(ready.Reason).To(Equal(sandboxv1.ReasonSourceSpecUnknown))
			g.Expect(ready.Message).To(And(ContainSubstring("imported by id"), ContainSubstring("spec.template.inherit")))
		}).Should(Succeed())
		expectEvent(key, "Warning SourceSpecUnknown")
		Consistently(func() []sandboxv1.Sandbox { return children("guess") }, pollInterval).Should(BeEmpty())

		out, err := kubectl("patch", "-n", ns, "sbxfork/guess", "--type=merge", "-p", `{"spec":{"template":{"inherit":"None"}}}`)
		Expect(err).NotTo(HaveOccurred(), out)
		forkReady("guess", 1)
		c := children("guess")[0]
		Expect(c.Spec.NetworkPolicy).To(BeNil())
		Expect(c.Spec.Env).To(BeEmpty())

		out, err = kubectl("patch", "-n", ns, "sbxfork/guess", "--type=merge", "-p", `{"spec":{"template":{"inherit":"Everything"}}}`)
		Expect(err).To(HaveOccurred(), out)
		Expect(out).To(ContainSubstring("spec.template.inherit"))
	})

	It("creates children for 63-character fork and source names, and for a 253-character fork name", func() {
		srcName := "s" + strings.Repeat("o", 61) + "e"
		forkName := "f" + strings.Repeat("o", 61) + "k"
		Expect(srcName).To(HaveLen(63))
		Expect(forkName).To(HaveLen(63))
		newSandbox(ns, srcName, sandboxv1.SandboxSpec{Source: runtimeSource("node24")})
		waitReady(types.NamespacedName{Namespace: ns, Name: srcName})
		newFork(forkName, sandboxRef(srcName), 2)
		forkReady(forkName, 2)
		kids := children(forkName)
		Expect(kids).To(HaveLen(2))
		for _, c := range kids {
			Expect(c.Name).To(HavePrefix(forkName + "-"))
			Expect(c.Labels).To(HaveKeyWithValue(sandboxv1.LabelFork, forkName))
			Expect(c.Labels).To(HaveKeyWithValue(sandboxv1.LabelSourceSandbox, srcName))
			// <fork>-capture is 71 characters: too long for a label value.
			Expect(c.Spec.Source.SnapshotRef.Name).To(Equal(forkName + "-capture"))
			Expect(validation.IsValidLabelValue(c.Labels[sandboxv1.LabelSourceSnapshot])).To(BeEmpty())
			Expect(c.Labels[sandboxv1.LabelSourceSnapshot]).To(HavePrefix(forkName[:46] + "-"))
		}

		By("forking that capture under a 253-character name, with kubectl")
		long := "l" + strings.Repeat("o", 251) + "g"
		newFork(long, snapshotRef(forkName+"-capture"), 1)
		forkReady(long, 1)
		kids = children(long)
		Expect(kids).To(HaveLen(1))
		Expect(validation.IsDNS1123Subdomain(kids[0].Name)).To(BeEmpty())
		Expect(len(kids[0].Name)).To(BeNumerically("<=", 253))
		Expect(kids[0].Name).To(HaveSuffix("-0"))
		out, err := kubectl("scale", "-n", ns, "sbxfork/"+long, "--replicas=2")
		Expect(err).NotTo(HaveOccurred(), out)
		forkReady(long, 2)
		out, err = kubectl("get", "sbx", "-n", ns, "-l", getFork(long).Status.Selector, "-o", "name")
		Expect(err).NotTo(HaveOccurred(), out)
		Expect(strings.Fields(out)).To(HaveLen(2))
	})
})
