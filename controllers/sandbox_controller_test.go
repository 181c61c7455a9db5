package controllers_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"sigs.k8s.io/controller-runtime/pkg/client"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
	"github.com/getsentry/sandbox-controller/controllers"
	"github.com/getsentry/sandbox-controller/internal/vercel"
	"github.com/getsentry/sandbox-controller/localstack/emulator"
)

var _ = Describe("Sandbox", func() {
	ctx := context.Background()
	var ns string
	BeforeEach(func() { ns = newNamespace() })

	Context("created from a runtime", func() {
		It("becomes one running Vercel sandbox, with routes and times in status, in one write", func() {
			key := types.NamespacedName{Namespace: ns, Name: "box"}
			created := newSandbox(ns, "box", sandboxv1.SandboxSpec{
				Source:         runtimeSource("node24"),
				Ports:          []int32{3000, 8080},
				TimeoutSeconds: ptr.To[int64](600),
				Resources:      &sandboxv1.SandboxResources{VCPUs: ptr.To[int32](2)},
			})
			Expect(created.Finalizers).To(ConsistOf(sandboxv1.SandboxFinalizer), "added at admission (config/admission)")
			sbx := waitReady(key)
			st := sbx.Status
			Expect(st.Phase).To(Equal(sandboxv1.SandboxRunning))
			Expect(st.VercelName).To(HavePrefix(ns + "-box-"))
			Expect(st.SessionID).To(MatchRegexp(`^sbx_[A-Za-z0-9]{28}$`))
			Expect(st.Routes).To(HaveLen(2))
			Expect(st.Routes[0].URL).To(HavePrefix(emu.URL()+"/_routes/sb-"), "the emulator serves the routes (ServeRoutes)")
			Expect(st.StartedAt).NotTo(BeNil())
			Expect(st.ExpiresAt).NotTo(BeNil())
			Expect(st.ExpiresAt.Sub(st.StartedAt.Time)).To(BeNumerically("~", 600*time.Second, 2*time.Second))
			Expect(st.ObservedGeneration).To(Equal(sbx.Generation))

			remote, ok := emu.Sandbox(st.VercelName)
			Expect(ok).To(BeTrue())
			Expect(remote.CurrentSessionID).To(Equal(st.SessionID))
			Expect(remote.VCPUs).To(Equal(int64(2)))
			Expect(remote.Tags).To(HaveKeyWithValue("k8s-uid", string(sbx.UID)))
			expectEvent(key, "Normal Created")
			// One write from create to Ready: the name is recorded with the
			// result (the finalizer was added at admission).
			Expect(writes.get(key)).To(Equal(1))

			By("writing nothing on a reconcile that finds nothing to do")
			before := writes.get(key)
			getsOf := func() int { return len(recorder.requests(http.MethodGet, "/"+sbx.Status.VercelName)) }
			gets := getsOf()
			sbx.Annotations = map[string]string{"touch": "1"}
			Expect(k8sClient.Update(ctx, sbx)).To(Succeed())
			Eventually(getsOf).Should(BeNumerically(">", gets), "this sandbox was looked at in Vercel since the touch")
			Consistently(func() int { return writes.get(key) }, 3*time.Second).Should(Equal(before))
		})

		It("reports the Vercel sandbox vanishing outside the operator instead of recreating it", func() {
			key := types.NamespacedName{Namespace: ns, Name: "vanish"}
			newSandbox(ns, "vanish", sandboxv1.SandboxSpec{Source: runtimeSource("node22")})
			name := waitReady(key).Status.VercelName
			_, err := vc.DeleteSandbox(ctx, name, false)
			Expect(err).NotTo(HaveOccurred())
			Eventually(readyCondition(key), 3*pollInterval).Should(And(
				HaveField("Status", metav1.ConditionFalse), HaveField("Reason", sandboxv1.ReasonNotFound)))
			Expect(getSandbox(key).Status.Phase).To(Equal(sandboxv1.SandboxFailed))
			Consistently(func() bool { _, ok := emu.Sandbox(name); return ok }, 2*pollInterval).Should(BeFalse())
			expectEvent(key, "Warning NotFound")
		})
	})

	Context("spec changes and Vercel errors", func() {
		It("applies a changed spec to the running sandbox", func() {
			key := types.NamespacedName{Namespace: ns, Name: "changing"}
			newSandbox(ns, "changing", sandboxv1.SandboxSpec{Source: runtimeSource("node24"), Ports: []int32{3000}})
			sbx := waitReady(key)
			Expect(sbx.Status.Routes).To(HaveLen(1))
			sbx.Spec.Ports = []int32{3000, 4000}
			sbx.Spec.Env = []sandboxv1.EnvVar{{Name: "MODE", Value: ptr.To("fast")}}
			Expect(k8sClient.Update(ctx, sbx)).To(Succeed())
			Eventually(func() []sandboxv1.SandboxRoute { return getSandbox(key).Status.Routes }).Should(HaveLen(2))
			Expect(getSandbox(key).Status.ObservedGeneration).To(Equal(sbx.Generation))
			patches := recorder.requests(http.MethodPatch, "/"+sbx.Status.VercelName)
			Expect(patches).NotTo(BeEmpty())
			var sent vercel.UpdateSandboxRequest
			Expect(json.Unmarshal(patches[len(patches)-1].Body, &sent)).To(Succeed())
			Expect(sent.Ports).To(Equal([]int64{3000, 4000}))
			Expect(sent.Env).To(Equal(map[string]string{"MODE": "fast"}))
			expectEvent(key, "Normal Updated")
		})

		It("reports a spec Vercel rejects as invalid, does not retry it, and recovers when the spec is fixed", func() {
			key := types.NamespacedName{Namespace: ns, Name: "toobig"}
			// 16 vCPUs pass the CRD (≤ 32) but exceed the emulated Pro plan (8).
			newSandbox(ns, "toobig", sandboxv1.SandboxSpec{Source: runtimeSource("node24"), Resources: &sandboxv1.SandboxResources{VCPUs: ptr.To[int32](16)}})
			synced := func(g Gomega) *metav1.Condition {
				return meta.FindStatusCondition(getSandbox(key).Status.Conditions, sandboxv1.ConditionSynced)
			}
			Eventually(synced).Should(And(Not(BeNil()), HaveField("Status", metav1.ConditionFalse), HaveField("Reason", sandboxv1.ReasonInvalid)))
			Expect(synced(Default).Message).To(ContainSubstring("vcpus"))
			Expect(getSandbox(key).Status.LastError).To(HaveField("Reason", sandboxv1.ReasonInvalid))
			expectEvent(key, "Warning Invalid")
			name := getSandbox(key).Status.VercelName
			Consistently(func() []recordedRequest { return createsFor(name) }, 3*time.Second).Should(HaveLen(1))

			sbx := getSandbox(key)
			sbx.Spec.Resources.VCPUs = ptr.To[int32](2)
			Expect(k8sClient.Update(ctx, sbx)).To(Succeed())
			waitReady(key)
			Expect(getSandbox(key).Status.LastError).To(BeNil())
		})
	})

	Context("sources", func() {
		It("clones a git repository with credentials from a Secret that reach Vercel but never status, events or logs", func() {
			repo := gitRepo(map[string]string{"README.md": "hello from git\n"})
			Expect(k8sClient.Create(ctx, &corev1.Secret{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "git-creds"},
				Data:       map[string][]byte{"username": []byte("x-access-token"), "password": []byte("ghp_SuperSecretGitToken123")},
			})).To(Succeed())
			key := types.NamespacedName{Namespace: ns, Name: "git"}
			newSandbox(ns, "git", sandboxv1.SandboxSpec{Source: sandboxv1.SandboxSource{Git: &sandboxv1.GitSource{
				URL: "file://" + repo, Depth: ptr.To[int32](1), Credentials: &sandboxv1.GitCredentials{SecretName: "git-creds"},
			}}})
			sbx := waitReady(key)

			var sent vercel.CreateSandboxRequest
			Expect(json.Unmarshal(lastCreateFor(sbx.Status.VercelName), &sent)).To(Succeed())
			Expect(sent.Source).NotTo(BeNil())
			Expect(sent.Source.Type).To(Equal("git"))
			Expect(sent.Source.Username).To(Equal("x-access-token"))
			Expect(sent.Source.Password).To(Equal("ghp_SuperSecretGitToken123"))
			expectSecretNowhere(key, "ghp_SuperSecretGitToken123")
		})

		It("extracts a tarball fetched from a URL", func() {
			tgz := tarGz(map[string]string{"hello.txt": "from the tarball\n"})
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write(tgz) }))
			DeferCleanup(srv.Close)
			key := types.NamespacedName{Namespace: ns, Name: "tarball"}
			newSandbox(ns, "tarball", sandboxv1.SandboxSpec{Source: sandboxv1.SandboxSource{Tarball: &sandboxv1.TarballSource{URL: srv.URL + "/src.tar.gz"}}})
			sbx := waitReady(key)
			data, err := vc.ReadFile(ctx, sbx.Status.SessionID, "hello.txt", "")
			Expect(err).NotTo(HaveOccurred())
			Expect(string(data)).To(Equal("from the tarball\n"))
		})

		It("boots from a Vercel snapshot id and records it", func() {
			snapID := snapshotWithFile("restored.txt", "from the snapshot\n")
			key := types.NamespacedName{Namespace: ns, Name: "fromsnap"}
			newSandbox(ns, "fromsnap", sandboxv1.SandboxSpec{Source: sandboxv1.SandboxSource{SnapshotID: &snapID}})
			sbx := waitReady(key)
			Expect(sbx.Status.BootedFrom).To(Equal(&sandboxv1.BootedFrom{SnapshotID: snapID}))
			data, err := vc.ReadFile(ctx, sbx.Status.SessionID, "/vercel/sandbox/restored.txt", "")
			Expect(err).NotTo(HaveOccurred())
			Expect(string(data)).To(Equal("from the snapshot\n"))
		})

		It("accepts a snapshotRef and reports that the SandboxSnapshot does not exist yet", func() {
			key := types.NamespacedName{Namespace: ns, Name: "fromref"}
			newSandbox(ns, "fromref", sandboxv1.SandboxSpec{Source: sandboxv1.SandboxSource{SnapshotRef: &sandboxv1.LocalObjectReference{Name: "base"}}})
			Eventually(readyCondition(key)).Should(And(Not(BeNil()),
				HaveField("Reason", sandboxv1.ReasonSnapshotRefNotFound), HaveField("Message", ContainSubstring(`"base"`))))
			Expect(getSandbox(key).Status.Phase).To(Equal(sandboxv1.SandboxPending))
			_, exists := emu.Sandbox(getSandbox(key).Status.VercelName)
			Expect(exists).To(BeFalse())
		})
	})

	Context("setup commands", func() {
		It("runs them in order before Ready, with env from Secrets that stays out of status", func() {
			Expect(k8sClient.Create(ctx, &corev1.Secret{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "api"},
				Data:       map[string][]byte{"key": []byte("sk_live_VerySecretValue42")},
			})).To(Succeed())
			key := types.NamespacedName{Namespace: ns, Name: "setup"}
			newSandbox(ns, "setup", sandboxv1.SandboxSpec{
				Source: runtimeSource("node24"),
				Env: []sandboxv1.EnvVar{
					{Name: "GREETING", Value: ptr.To("hi")},
					{Name: "API_KEY", ValueFrom: &sandboxv1.EnvVarSource{SecretKeyRef: sandboxv1.SecretKeySelector{Name: "api", Key: "key"}}},
				},
				Setup: []sandboxv1.SetupCommand{
					{Name: "first", Command: "sh", Args: []string{"-c", "sleep 1; echo $GREETING > /vercel/sandbox/order"}},
					{Name: "second", Command: "sh", Args: []string{"-c", "echo second >> /vercel/sandbox/order; printf %s \"$API_KEY\" > /tmp/key"}},
				},
			})
			Eventually(func() sandboxv1.SandboxPhase { return getSandbox(key).Status.Phase }).Should(Equal(sandboxv1.SandboxSettingUp))
			sbx := waitReady(key)
			Expect(sbx.Status.Setup).To(HaveField("Completed", int32(2)))
			order, err := vc.ReadFile(ctx, sbx.Status.SessionID, "order", "")
			Expect(err).NotTo(HaveOccurred())
			Expect(string(order)).To(Equal("hi\nsecond\n"))
			secret, err := vc.ReadFile(ctx, sbx.Status.SessionID, "/tmp/key", "")
			Expect(err).NotTo(HaveOccurred())
			Expect(string(secret)).To(Equal("sk_live_VerySecretValue42"))
			expectSecretNowhere(key, "sk_live_VerySecretValue42")
		})

		It("fails with the exit code and the output tail, scrubbed of secrets", func() {
			Expect(k8sClient.Create(ctx, &corev1.Secret{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "api"},
				Data:       map[string][]byte{"key": []byte("sk_live_EchoedByMistake9")},
			})).To(Succeed())
			key := types.NamespacedName{Namespace: ns, Name: "badsetup"}
			newSandbox(ns, "badsetup", sandboxv1.SandboxSpec{
				Source: runtimeSource("node24"),
				Env:    []sandboxv1.EnvVar{{Name: "API_KEY", ValueFrom: &sandboxv1.EnvVarSource{SecretKeyRef: sandboxv1.SecretKeySelector{Name: "api", Key: "key"}}}},
				Setup: []sandboxv1.SetupCommand{
					{Command: "true"},
					{Name: "build", Command: "sh", Args: []string{"-c", "echo compiling; echo token=$API_KEY; echo boom >&2; exit 3"}},
					{Name: "never", Command: "sh", Args: []string{"-c", "touch /vercel/sandbox/never"}},
				},
			})
			Eventually(readyCondition(key)).Should(And(Not(BeNil()), HaveField("Reason", sandboxv1.ReasonSetupFailed)))
			cond := readyCondition(key)(Default)
			Expect(cond.Message).To(ContainSubstring("step 2 (build) exited with code 3"))
			Expect(cond.Message).To(ContainSubstring("boom"))
			Expect(cond.Message).To(ContainSubstring("token=[redacted]"))
			sbx := getSandbox(key)
			Expect(sbx.Status.Phase).To(Equal(sandboxv1.SandboxFailed))
			expectEvent(key, "Warning SetupFailed")
			_, err := vc.ReadFile(ctx, sbx.Status.SessionID, "never", "")
			Expect(vercel.IsNotFound(err)).To(BeTrue(), "the step after the failed one must not run")
			expectSecretNowhere(key, "sk_live_EchoedByMistake9")
		})
	})

	Context("network policy", func() {
		It("opens egress again, for the running session and the next ones, when spec.networkPolicy is removed", func() {
			key := types.NamespacedName{Namespace: ns, Name: "unfenced"}
			newSandbox(ns, key.Name, sandboxv1.SandboxSpec{Source: runtimeSource("node24"), NetworkPolicy: &sandboxv1.NetworkPolicy{
				Mode: sandboxv1.NetworkAllowlist, AllowedDomains: []string{"registry.npmjs.org"},
			}})
			sbx := waitReady(key)
			vsb, _ := emu.Sandbox(sbx.Status.VercelName)
			Expect(vsb.NetworkPolicy).NotTo(BeNil())
			Expect(vsb.NetworkPolicy.Mode).To(Equal(vercel.NetworkCustom))

			sbx.Spec.NetworkPolicy = nil
			Expect(k8sClient.Update(ctx, sbx)).To(Succeed())
			Eventually(func() int64 { return getSandbox(key).Status.ObservedGeneration }).Should(Equal(sbx.Generation))
			sess, err := vc.GetSession(ctx, sbx.Status.SessionID)
			Expect(err).NotTo(HaveOccurred())
			Expect(sess.Session.NetworkPolicy.Mode).To(Equal(vercel.NetworkAllowAll), "the running session")
			vsb, _ = emu.Sandbox(sbx.Status.VercelName)
			Expect(vsb.NetworkPolicy).NotTo(BeNil())
			Expect(vsb.NetworkPolicy.Mode).To(Equal(vercel.NetworkAllowAll), "the next sessions")
		})

		It("injects headers whose values come from Secrets, which Vercel receives and nobody reads back", func() {
			Expect(k8sClient.Create(ctx, &corev1.Secret{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "gh"},
				Data:       map[string][]byte{"token": []byte("Bearer ghs_InjectedHeaderSecret7")},
			})).To(Succeed())
			key := types.NamespacedName{Namespace: ns, Name: "egress"}
			newSandbox(ns, "egress", sandboxv1.SandboxSpec{
				Source: runtimeSource("node24"),
				NetworkPolicy: &sandboxv1.NetworkPolicy{
					Mode:           sandboxv1.NetworkAllowlist,
					AllowedDomains: []string{"registry.npmjs.org"},
					InjectHeaders: []sandboxv1.HeaderInjection{{
						Domain:  "api.github.com",
						Headers: []sandboxv1.InjectedHeader{{Name: "Authorization", ValueFrom: sandboxv1.EnvVarSource{SecretKeyRef: sandboxv1.SecretKeySelector{Name: "gh", Key: "token"}}}},
					}},
				},
			})
			sbx := waitReady(key)
			var sent vercel.CreateSandboxRequest
			Expect(json.Unmarshal(lastCreateFor(sbx.Status.VercelName), &sent)).To(Succeed())
			// An Allowlist goes in the allow/subnets form, injectHeaders as a
			// transform rule of its domain.
			Expect(sent.NetworkPolicy.Mode).To(BeEmpty())
			Expect(sent.NetworkPolicy.Allow).NotTo(BeNil())
			Expect(sent.NetworkPolicy.Allow.Rules).To(HaveLen(2))
			Expect(sent.NetworkPolicy.Allow.Rules).To(HaveKeyWithValue("registry.npmjs.org", BeEmpty()))
			Expect(sent.NetworkPolicy.Allow.Rules).To(HaveKeyWithValue("api.github.com", ConsistOf(HaveField("Transform",
				ConsistOf(HaveField("Headers", HaveKeyWithValue("Authorization", "Bearer ghs_InjectedHeaderSecret7")))))))

			sess, err := vc.GetSession(ctx, sbx.Status.SessionID)
			Expect(err).NotTo(HaveOccurred())
			Expect(sess.Session.NetworkPolicy.InjectionRules).To(ConsistOf(And(
				HaveField("HeaderNames", ConsistOf("Authorization")), HaveField("Headers", BeEmpty()))))
			expectSecretNowhere(key, "ghs_InjectedHeaderSecret7")
		})
	})

	Context("deletion", func() {
		It("deletes the Vercel sandbox before releasing the object", func() {
			key := types.NamespacedName{Namespace: ns, Name: "gone"}
			newSandbox(ns, "gone", sandboxv1.SandboxSpec{Source: runtimeSource("node24")})
			sbx := waitReady(key)
			Expect(k8sClient.Delete(ctx, sbx)).To(Succeed())
			Eventually(func() bool { return apierrors.IsNotFound(k8sClient.Get(ctx, key, &sandboxv1.Sandbox{})) }).Should(BeTrue())
			_, ok := emu.Sandbox(sbx.Status.VercelName)
			Expect(ok).To(BeFalse())
		})

		It("deletes the automatic snapshots of its pauses but keeps a SandboxSnapshot's capture", func() {
			key := types.NamespacedName{Namespace: ns, Name: "paused"}
			newSandbox(ns, "paused", sandboxv1.SandboxSpec{Source: runtimeSource("node24")})
			sbx := waitReady(key)
			name := sbx.Status.VercelName

			By("capturing it with a SandboxSnapshot (a manual snapshot)")
			Expect(k8sClient.Create(ctx, &sandboxv1.SandboxSnapshot{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "kept"},
				Spec: sandboxv1.SandboxSnapshotSpec{
					Source:            sandboxv1.SandboxSnapshotSource{SandboxRef: &sandboxv1.LocalObjectReference{Name: "paused"}},
					KeepSourceRunning: true,
				},
			})).To(Succeed())
			capture := &sandboxv1.SandboxSnapshot{}
			Eventually(func(g Gomega) {
				g.Expect(k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: "kept"}, capture)).To(Succeed())
				g.Expect(capture.Status.ReadyToUse).To(BeTrue())
			}, 60*time.Second).Should(Succeed())
			waitReady(key)

			By("pausing it, which makes Vercel take an automatic snapshot")
			setState(key, sandboxv1.SandboxStateStopped)
			Eventually(func() sandboxv1.SandboxPhase { return getSandbox(key).Status.Phase }).Should(Equal(sandboxv1.SandboxStopped))
			automatic := func() []string {
				snaps, err := vc.ListAllSnapshots(ctx, vercel.ListSnapshotsOptions{Name: name})
				Expect(err).NotTo(HaveOccurred())
				var ids []string
				for _, s := range snaps {
					if s.CreationMethod == "automatic" && s.Status == vercel.SnapshotCreated {
						ids = append(ids, s.ID)
					}
				}
				return ids
			}
			Expect(automatic()).NotTo(BeEmpty())

			Expect(k8sClient.Delete(ctx, getSandbox(key))).To(Succeed())
			Eventually(func() bool { return apierrors.IsNotFound(k8sClient.Get(ctx, key, &sandboxv1.Sandbox{})) }).Should(BeTrue())
			Expect(automatic()).To(BeEmpty())
			kept, err := vc.GetSnapshot(ctx, capture.Status.SnapshotID)
			Expect(err).NotTo(HaveOccurred())
			Expect(kept.Status).To(Equal(vercel.SnapshotCreated))
		})

		It("leaves the Vercel sandbox in place with deletionPolicy Retain", func() {
			key := types.NamespacedName{Namespace: ns, Name: "kept"}
			newSandbox(ns, "kept", sandboxv1.SandboxSpec{Source: runtimeSource("node24"), DeletionPolicy: sandboxv1.DeletionPolicyRetain})
			sbx := waitReady(key)
			Expect(k8sClient.Delete(ctx, sbx)).To(Succeed())
			Eventually(func() bool { return apierrors.IsNotFound(k8sClient.Get(ctx, key, &sandboxv1.Sandbox{})) }).Should(BeTrue())
			remote, ok := emu.Sandbox(sbx.Status.VercelName)
			Expect(ok).To(BeTrue())
			Expect(remote.Status).To(Equal(vercel.SessionRunning))
			_, err := vc.DeleteSandbox(ctx, sbx.Status.VercelName, true)
			Expect(err).NotTo(HaveOccurred())
		})
	})

	// These specs inject faults into the emulator and restart the manager:
	// each parallel process has a stack of its own (suite_test.go) and runs
	// one spec at a time, so no other spec sees them.
	Context("crash safety and rate limits", func() {
		AfterEach(func() { emu.Faults().Reset() })

		It("adopts a sandbox whose create committed but whose answer was lost, across a manager restart", func() {
			snapID := snapshotWithFile("adopted.txt", "booted\n")
			newSnapshot(ns, "lost-base", sandboxv1.SandboxSnapshotSpec{Source: sandboxv1.SandboxSnapshotSource{SnapshotID: &snapID}})
			waitSnapshotReady(types.NamespacedName{Namespace: ns, Name: "lost-base"})
			emu.Faults().CommitThenFail("createSandbox", 3, emulator.FailDropConnection)
			key := types.NamespacedName{Namespace: ns, Name: "lost"}
			newSandbox(ns, "lost", sandboxv1.SandboxSpec{Source: sandboxv1.SandboxSource{SnapshotRef: &sandboxv1.LocalObjectReference{Name: "lost-base"}}})
			Eventually(func() string { return getSandbox(key).Status.VercelName }).ShouldNot(BeEmpty())
			name := getSandbox(key).Status.VercelName
			Eventually(func() bool { _, ok := emu.Sandbox(name); return ok }).Should(BeTrue())
			restartManager()
			sbx := waitReady(key)
			owned := 0
			for _, s := range emu.LiveSandboxes() {
				if s.Tags["k8s-uid"] == string(sbx.UID) {
					owned++
					Expect(s.CurrentSessionID).To(Equal(sbx.Status.SessionID))
				}
			}
			Expect(owned).To(Equal(1))
			Expect(sbx.Status.BootedFrom).To(Equal(&sandboxv1.BootedFrom{SnapshotID: snapID, SnapshotName: "lost-base"}), "recorded from the adopted session")
		})

		// The name is recorded with the create's result, in one status write:
		// a manager that dies between the create and that write leaves a
		// tagged Vercel sandbox and a status that names none. Simulated with a
		// paused Sandbox and the sandbox its create would have made.
		createdButNotRecorded := func(name string) (*sandboxv1.Sandbox, string) {
			sbx := &sandboxv1.Sandbox{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Annotations: map[string]string{sandboxv1.AnnotationPaused: "true"}},
				Spec:       sandboxv1.SandboxSpec{Source: runtimeSource("node24")},
			}
			Expect(k8sClient.Create(ctx, sbx)).To(Succeed())
			vname := controllers.VercelName(ns, name, sbx.UID)
			_, err := vc.CreateSandbox(ctx, vercel.CreateSandboxRequest{Name: vname, Runtime: "node24", Tags: controllers.OwnerTags(clusterID, sbx.UID)})
			Expect(err).NotTo(HaveOccurred())
			Eventually(readyCondition(client.ObjectKeyFromObject(sbx))).Should(BeNil())
			Expect(getSandbox(client.ObjectKeyFromObject(sbx)).Status.VercelName).To(BeEmpty())
			return sbx, vname
		}

		It("adopts the sandbox of a create whose status write never happened", func() {
			sbx, vname := createdButNotRecorded("unrecorded")
			creates := len(createsFor(vname))
			annotateObj(sbx, sandboxv1.AnnotationPaused, "")
			got := waitReady(client.ObjectKeyFromObject(sbx))
			Expect(got.Status.VercelName).To(Equal(vname))
			remote, ok := emu.Sandbox(vname)
			Expect(ok).To(BeTrue())
			Expect(got.Status.SessionID).To(Equal(remote.CurrentSessionID))
			Expect(len(createsFor(vname))-creates).To(BeNumerically("<=", 1), "one create, answered 'name exists'")
			owned := 0
			for _, s := range emu.LiveSandboxes() {
				if s.Tags["k8s-uid"] == string(sbx.UID) {
					owned++
				}
			}
			Expect(owned).To(Equal(1))
		})

		// The flake behind this spec: a create from a snapshotRef whose
		// status write was lost is found by name on the next look at Vercel,
		// which goes straight to the running path; what the create had
		// resolved (ResolvedRefs, the content hash booted from) was lost with
		// the write and never recorded again.
		It("adopts an unrecorded create from a snapshotRef with its reference resolved", func() {
			// The status names the sandbox (written while the reference was
			// missing) but no session: every look at Vercel then finds it.
			snapID := snapshotWithFile("unrecorded-ref.txt", "booted\n")
			key := types.NamespacedName{Namespace: ns, Name: "unrecorded-ref"}
			newSandbox(ns, key.Name, sandboxv1.SandboxSpec{Source: sandboxv1.SandboxSource{SnapshotRef: &sandboxv1.LocalObjectReference{Name: "unrecorded-base"}}})
			Eventually(func() string { return getSandbox(key).Status.VercelName }).ShouldNot(BeEmpty())
			sbx := getSandbox(key)
			annotateObj(sbx, sandboxv1.AnnotationPaused, "true")
			newSnapshot(ns, "unrecorded-base", sandboxv1.SandboxSnapshotSpec{Source: sandboxv1.SandboxSnapshotSource{SnapshotID: &snapID}})
			snap := waitSnapshotReady(types.NamespacedName{Namespace: ns, Name: "unrecorded-base"})
			Expect(createsFor(sbx.Status.VercelName)).To(BeEmpty(), "paused: the operator created nothing")
			// What the operator's create would have made before its status
			// write was lost.
			_, err := vc.CreateSandbox(ctx, vercel.CreateSandboxRequest{Name: sbx.Status.VercelName, Tags: controllers.OwnerTags(clusterID, sbx.UID),
				Source: &vercel.Source{Type: vercel.SourceSnapshot, SnapshotID: snapID}})
			Expect(err).NotTo(HaveOccurred())
			annotateObj(sbx, sandboxv1.AnnotationPaused, "")
			got := waitReady(key)
			Expect(got.Status.BootedFrom).To(Equal(&sandboxv1.BootedFrom{SnapshotID: snapID, SnapshotName: "unrecorded-base", ContentHash: snap.Status.ContentHash}))
			Expect(meta.FindStatusCondition(got.Status.Conditions, sandboxv1.ConditionResolvedRefs)).To(And(
				Not(BeNil()), HaveField("Status", metav1.ConditionTrue), HaveField("Reason", sandboxv1.ReasonResolved)))
		})

		It("deletes the sandbox of a create whose status write never happened", func() {
			sbx, vname := createdButNotRecorded("unrecorded-delete")
			Expect(k8sClient.Delete(ctx, sbx)).To(Succeed())
			Eventually(func() bool {
				return apierrors.IsNotFound(k8sClient.Get(ctx, client.ObjectKeyFromObject(sbx), &sandboxv1.Sandbox{}))
			}).Should(BeTrue())
			_, ok := emu.Sandbox(vname)
			Expect(ok).To(BeFalse(), "the Vercel sandbox was deleted before the finalizer went")
		})

		It("confirms a delete whose answer was lost, across a manager restart", func() {
			key := types.NamespacedName{Namespace: ns, Name: "lostdelete"}
			newSandbox(ns, "lostdelete", sandboxv1.SandboxSpec{Source: runtimeSource("node24")})
			sbx := waitReady(key)
			emu.Faults().CommitThenFail("deleteSandbox", 3, emulator.FailDropConnection)
			Expect(k8sClient.Delete(ctx, sbx)).To(Succeed())
			Eventually(func() bool { _, ok := emu.Sandbox(sbx.Status.VercelName); return ok }).Should(BeFalse())
			restartManager()
			Eventually(func() bool { return apierrors.IsNotFound(k8sClient.Get(ctx, key, &sandboxv1.Sandbox{})) }).Should(BeTrue())
		})

		It("backs off on 5xx answers, reporting them in Synced, and recovers", func() {
			emu.Faults().FailNext("createSandbox", 3, http.StatusServiceUnavailable)
			key := types.NamespacedName{Namespace: ns, Name: "flaky"}
			newSandbox(ns, "flaky", sandboxv1.SandboxSpec{Source: runtimeSource("node24")})
			Eventually(func(g Gomega) *metav1.Condition {
				return meta.FindStatusCondition(getSandbox(key).Status.Conditions, sandboxv1.ConditionSynced)
			}).Should(And(Not(BeNil()), HaveField("Reason", sandboxv1.ReasonTransient)))
			waitReady(key)
			cond := meta.FindStatusCondition(getSandbox(key).Status.Conditions, sandboxv1.ConditionSynced)
			Expect(cond.Status).To(Equal(metav1.ConditionTrue))
			expectEvent(key, "Warning Transient")
		})

		It("waits out 429s with Retry-After and becomes Ready without a hot loop", func() {
			emu.Faults().RateLimit("createSandbox", 4, time.Second)
			key := types.NamespacedName{Namespace: ns, Name: "limited"}
			start := time.Now()
			newSandbox(ns, "limited", sandboxv1.SandboxSpec{Source: runtimeSource("node24")})
			waitReady(key)
			Expect(time.Since(start)).To(BeNumerically(">=", 4*time.Second))
			Expect(createsFor(getSandbox(key).Status.VercelName)).To(HaveLen(5), "four 429 answers, then one create")
		})
	})

	Context("validation by the API server", func() {
		DescribeTable("refuses a bad manifest with a message naming the field",
			func(spec, want string) {
				manifest := "apiVersion: sandbox.sentry.io/v1alpha1\nkind: Sandbox\nmetadata:\n  name: bad\n  namespace: " + ns + "\nspec:\n" + spec
				out, err := kubectlApply(manifest)
				Expect(err).To(HaveOccurred(), out)
				Expect(out).To(ContainSubstring(want))
			},
			Entry("two sources", "  source: {runtime: node24, snapshotID: snap_abcdefghijklmnopqrstuvwxyz12}\n", "spec.source: exactly one of"),
			Entry("no source", "  source: {}\n", "spec.source: exactly one of"),
			Entry("unknown runtime", "  source: {runtime: ruby}\n", "spec.source.runtime"),
			Entry("odd vcpus", "  source: {runtime: node24}\n  resources: {vcpus: 3}\n", "spec.resources.vcpus must be 1 or an even number"),
			Entry("too many vcpus", "  source: {runtime: node24}\n  resources: {vcpus: 34}\n", "spec.resources.vcpus"),
			Entry("too many ports", "  source: {runtime: node24}\n  ports: [3000,3001,3002,3003,3004,3005,3006,3007,3008,3009,3010,3011,3012,3013,3014,3015]\n", "spec.ports"),
			Entry("duplicate ports", "  source: {runtime: node24}\n  ports: [3000, 3000]\n", "spec.ports[1]"),
			Entry("privileged port", "  source: {runtime: node24}\n  ports: [80]\n", "spec.ports[0]"),
			Entry("reserved port", "  source: {runtime: node24}\n  ports: [23456]\n", "spec.ports must not contain 23456"),
			Entry("zero timeout", "  source: {runtime: node24}\n  timeoutSeconds: 0\n", "spec.timeoutSeconds"),
			Entry("bad env name", "  source: {runtime: node24}\n  env: [{name: 1BAD, value: x}]\n", "spec.env[0].name"),
			Entry("bad header name", "  source: {runtime: node24}\n  networkPolicy: {mode: Allowlist, injectHeaders: [{domain: a.com, headers: [{name: 'bad header', valueFrom: {secretKeyRef: {name: s, key: k}}}]}]}\n", "spec.networkPolicy.injectHeaders[0].headers[0].name"),
			Entry("bad snapshot id", "  source: {snapshotID: nope}\n", "spec.source.snapshotID"),
			Entry("image and runtime", "  source: {runtime: node24, image: vercel/sandbox/node:24}\n", "spec.source: exactly one of runtime, image,"),
			Entry("not an image reference", "  source: {image: \"Acme/Private Image\"}\n", "spec.source.image"),
			Entry("unknown region", "  source: {runtime: node24}\n  region: mars1\n", "spec.region"),
			Entry("failover names the region", "  source: {runtime: node24}\n  region: fra1\n  failoverRegions: [cdg1, fra1]\n", "spec.failoverRegions must not contain the sandbox's region"),
			Entry("failover names the default region", "  source: {runtime: node24}\n  failoverRegions: [iad1]\n", "spec.failoverRegions must not contain the sandbox's region"),
			Entry("failover twice", "  source: {runtime: node24}\n  failoverRegions: [cdg1, cdg1]\n", "spec.failoverRegions[1]"),
			Entry("retention of a non-persistent sandbox", "  source: {runtime: node24}\n  persistent: false\n  snapshotRetention: {keepLast: 2}\n", "spec.snapshotRetention is only for persistent Sandboxes"),
			Entry("keep too many", "  source: {runtime: node24}\n  snapshotRetention: {keepLast: 11}\n", "spec.snapshotRetention.keepLast"),
		)

		It("refuses to change the source or persistence after creation", func() {
			out, err := kubectlApply("apiVersion: sandbox.sentry.io/v1alpha1\nkind: Sandbox\nmetadata:\n  name: fixed\n  namespace: " + ns + "\nspec:\n  source: {snapshotRef: {name: not-yet}}\n")
			Expect(err).NotTo(HaveOccurred(), out)
			out, err = kubectlApply("apiVersion: sandbox.sentry.io/v1alpha1\nkind: Sandbox\nmetadata:\n  name: fixed\n  namespace: " + ns + "\nspec:\n  source: {snapshotRef: {name: other}}\n")
			Expect(err).To(HaveOccurred(), out)
			Expect(out).To(ContainSubstring("spec.source is immutable"))
			out, err = kubectlApply("apiVersion: sandbox.sentry.io/v1alpha1\nkind: Sandbox\nmetadata:\n  name: fixed\n  namespace: " + ns + "\nspec:\n  source: {snapshotRef: {name: not-yet}}\n  persistent: false\n")
			Expect(err).To(HaveOccurred(), out)
			Expect(out).To(ContainSubstring("spec.persistent is immutable"))
		})
	})

	Context("with kubectl", func() {
		It("applies the samples and waits for Ready", func() {
			out, err := kubectl("apply", "-n", ns, "-f", "config/samples/")
			Expect(err).NotTo(HaveOccurred(), out)
			out, err = kubectl("wait", "-n", ns, "--for=condition=Ready", "sandbox", "--all", "--timeout=60s")
			Expect(err).NotTo(HaveOccurred(), out)
			Expect(out).To(ContainSubstring("condition met"))
			out, err = kubectl("get", "sbx", "-n", ns)
			Expect(err).NotTo(HaveOccurred(), out)
			Expect(out).To(MatchRegexp(`(?m)^NAME\s+PHASE\s+READY\s+SESSION\s+EXPIRES\s+AGE`))
			Expect(out).To(MatchRegexp(`(?m)^hello\s+Running\s+True\s+sbx_`))
		})
	})
})

// expectSecretNowhere asserts a secret value appears in none of the object's
// status, its events, or the manager's logs.
func expectSecretNowhere(key types.NamespacedName, secret string) {
	sbx := getSandbox(key)
	status, err := json.Marshal(sbx.Status)
	Expect(err).NotTo(HaveOccurred())
	Expect(string(status)).NotTo(ContainSubstring(secret))
	Expect(strings.Join(eventsFor(key), "\n")).NotTo(ContainSubstring(secret))
	Expect(logs.String()).NotTo(ContainSubstring(secret))
}

// createsFor returns the create requests for the Vercel sandbox name, oldest first.
// Specs count these rather than the emulator's global counter, which other specs'
// objects move too.
func createsFor(name string) []recordedRequest {
	var out []recordedRequest
	for _, r := range recorder.requests(http.MethodPost, "/sandboxes") {
		if strings.HasSuffix(strings.TrimSuffix(r.Path, "/"), "/sandboxes") && bytes.Contains(r.Body, []byte(`"`+name+`"`)) {
			out = append(out, r)
		}
	}
	return out
}

// lastCreateFor returns the body of the last create request for a Vercel name.
func lastCreateFor(name string) []byte {
	GinkgoHelper()
	creates := createsFor(name)
	Expect(creates).NotTo(BeEmpty(), "no create request for %s reached Vercel", name)
	return creates[len(creates)-1].Body
}

func kubectlApply(manifest string) (string, error) { return kubectlWithManifest(manifest, "apply") }

// snapshotWithFile makes a Vercel snapshot holding one file, directly through
// the client, and cleans up the sandbox it used.
func snapshotWithFile(path, content string) string {
	ctx := context.Background()
	name := "snapsrc-" + strings.ToLower(strings.ReplaceAll(time.Now().Format("150405.000000"), ".", ""))
	resp, err := vc.CreateSandbox(ctx, vercel.CreateSandboxRequest{Name: name})
	Expect(err).NotTo(HaveOccurred())
	Expect(vc.WriteFiles(ctx, resp.Session.ID, []vercel.File{{Path: path, Content: []byte(content)}})).To(Succeed())
	snap, err := vc.CreateSnapshot(ctx, resp.Session.ID, nil)
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(func() { _, _ = vc.DeleteSandbox(context.Background(), name, false) })
	return snap.Snapshot.ID
}

func tarGz(files map[string]string) []byte {
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for name, content := range files {
		Expect(tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(content)), Typeflag: tar.TypeReg})).To(Succeed())
		_, err := tw.Write([]byte(content))
		Expect(err).NotTo(HaveOccurred())
	}
	Expect(tw.Close()).To(Succeed())
	Expect(gz.Close()).To(Succeed())
	return buf.Bytes()
}

// gitRepo makes a local git repository with one commit.
func gitRepo(files map[string]string) string {
	dir := GinkgoT().TempDir()
	for name, content := range files {
		Expect(os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644)).To(Succeed())
	}
	for _, args := range [][]string{{"init", "-q"}, {"add", "."}, {"-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-qm", "init"}} {
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		Expect(err).NotTo(HaveOccurred(), string(out))
	}
	return dir
}
