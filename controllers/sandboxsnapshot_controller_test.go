package controllers_test

import (
	"context"
	"encoding/json"
	"net/http"
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

var _ = Describe("SandboxSnapshot", func() {
	ctx := context.Background()
	var ns string
	BeforeEach(func() { ns = newNamespace() })

	Context("validation", func() {
		It("refuses a source with two fields and a change of source", func() {
			id := "snap_" + strings.Repeat("a", 28)
			bad := &sandboxv1.SandboxSnapshot{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "two"},
				Spec: sandboxv1.SandboxSnapshotSpec{Source: sandboxv1.SandboxSnapshotSource{
					SnapshotID: &id, SandboxRef: &sandboxv1.LocalObjectReference{Name: "x"},
				}},
			}
			err := k8sClient.Create(ctx, bad)
			Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
			Expect(err.Error()).To(ContainSubstring("exactly one of sandboxRef, snapshotID or recipe"))

			snap := newSnapshot(ns, "one", sandboxv1.SandboxSnapshotSpec{Source: sandboxv1.SandboxSnapshotSource{SnapshotID: &id}})
			other := "snap_" + strings.Repeat("b", 28)
			patch := client.MergeFrom(snap.DeepCopy())
			snap.Spec.Source.SnapshotID = &other
			err = k8sClient.Patch(ctx, snap, patch)
			Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
			Expect(err.Error()).To(ContainSubstring("spec.source is immutable"))
		})
	})

	Context("importing a snapshot id", func() {
		It("reports size and expiry, turns Expired when Vercel deletes it, and never deletes it, whatever the deletionPolicy", func() {
			id := vercelSnapshot(ctx, ns+"-imp", nil)
			key := types.NamespacedName{Namespace: ns, Name: "imported"}
			newSnapshot(ns, key.Name, sandboxv1.SandboxSnapshotSpec{Source: sandboxv1.SandboxSnapshotSource{SnapshotID: &id}})
			snap := waitSnapshotReady(key)
			Expect(snap.Status.Phase).To(Equal(sandboxv1.SnapshotReady))
			Expect(snap.Status.SnapshotID).To(Equal(id))
			Expect(snap.Status.SizeBytes).To(BeNumerically(">", 0))
			Expect(snap.Status.CreatedAt).NotTo(BeNil())
			Expect(snap.Status.ExpiresAt).NotTo(BeNil())
			Expect(snap.Status.ExpiresAt.Time).To(BeTemporally(">", time.Now().Add(24*time.Hour)))
			Expect(snap.Finalizers).To(ContainElement(sandboxv1.SandboxSnapshotFinalizer))

			out, err := kubectl("get", "sbxsnap", "-n", ns)
			Expect(err).NotTo(HaveOccurred(), out)
			Expect(out).To(ContainSubstring("PHASE"))
			Expect(out).To(ContainSubstring("SNAPSHOTID"))
			Expect(out).To(MatchRegexp(`imported\s+Ready\s+true\s+` + id))

			By("turning Expired when Vercel deleted it outside the operator")
			_, err = vc.DeleteSnapshot(ctx, id)
			Expect(err).NotTo(HaveOccurred())
			Eventually(func(g Gomega) {
				s := getSnapshotObj(key)
				g.Expect(s.Status.Phase).To(Equal(sandboxv1.SnapshotExpired))
				g.Expect(s.Status.ReadyToUse).To(BeFalse())
				c := meta.FindStatusCondition(s.Status.Conditions, sandboxv1.ConditionReady)
				g.Expect(c).NotTo(BeNil())
				g.Expect(c.Reason).To(Equal(sandboxv1.ReasonExpired))
			}, 3*pollInterval+10*time.Second).Should(Succeed())
			expectEvent(key, "Warning Expired")
			deleteAndWait(key)

			By("leaving it in Vercel with deletionPolicy Delete: the operator did not make it")
			id2 := vercelSnapshot(ctx, ns+"-del", nil)
			del := types.NamespacedName{Namespace: ns, Name: "delete-me"}
			newSnapshot(ns, del.Name, sandboxv1.SandboxSnapshotSpec{Source: sandboxv1.SandboxSnapshotSource{SnapshotID: &id2}})
			Expect(waitSnapshotReady(del).Status.Provenance).To(Equal(&sandboxv1.SnapshotProvenance{
				Origin: sandboxv1.SnapshotImported, SourceSessionID: emuSnapshot(id2).SourceSessionID,
			}))
			deleteAndWait(del)
			Expect(emuSnapshot(id2).Status).To(Equal(vercel.SnapshotCreated))
			expectEvent(del, "Normal Retained: Left imported Vercel snapshot "+id2)

			By("leaving it in Vercel with deletionPolicy Retain")
			id3 := vercelSnapshot(ctx, ns+"-ret", nil)
			ret := types.NamespacedName{Namespace: ns, Name: "retain-me"}
			newSnapshot(ns, ret.Name, sandboxv1.SandboxSnapshotSpec{
				Source: sandboxv1.SandboxSnapshotSource{SnapshotID: &id3}, DeletionPolicy: sandboxv1.DeletionPolicyRetain,
			})
			waitSnapshotReady(ret)
			deleteAndWait(ret)
			Expect(emuSnapshot(id3).Status).To(Equal(vercel.SnapshotCreated))
			expectEvent(ret, "Normal Retained")
		})

		It("reports a Vercel error in Synced, lastError and a Warning event, and recovers", func() {
			id := vercelSnapshot(ctx, ns+"-flaky", nil)
			key := types.NamespacedName{Namespace: ns, Name: "flaky"}
			// Other specs' SandboxSnapshots poll too: fail every read until
			// this one has reported, then none.
			emu.Faults().FailNext("getSnapshot", 1_000_000, http.StatusServiceUnavailable)
			DeferCleanup(emu.Faults().Reset)
			newSnapshot(ns, key.Name, sandboxv1.SandboxSnapshotSpec{Source: sandboxv1.SandboxSnapshotSource{SnapshotID: &id}})
			Eventually(func(g Gomega) {
				s := getSnapshotObj(key)
				synced := meta.FindStatusCondition(s.Status.Conditions, sandboxv1.ConditionSynced)
				g.Expect(synced).NotTo(BeNil())
				g.Expect(synced.Status).To(Equal(metav1.ConditionFalse))
				g.Expect(synced.Reason).To(Equal(sandboxv1.ReasonTransient))
				g.Expect(s.Status.LastError).NotTo(BeNil())
				g.Expect(s.Status.LastError.Reason).To(Equal(sandboxv1.ReasonTransient))
				g.Expect(s.Status.LastError.Message).To(ContainSubstring("get snapshot " + id))
			}).Should(Succeed())
			expectEvent(key, "Warning Transient: get snapshot "+id)
			emu.Faults().Reset()
			snap := waitSnapshotReady(key)
			Expect(snap.Status.LastError).To(BeNil())
			Expect(meta.IsStatusConditionTrue(snap.Status.Conditions, sandboxv1.ConditionSynced)).To(BeTrue())
		})

		It("leaves a Vercel snapshot imported by two SandboxSnapshots in place when both are deleted", func() {
			id := vercelSnapshot(ctx, ns+"-shared", nil)
			a := types.NamespacedName{Namespace: ns, Name: "a"}
			b := types.NamespacedName{Namespace: ns, Name: "b"}
			newSnapshot(ns, a.Name, sandboxv1.SandboxSnapshotSpec{Source: sandboxv1.SandboxSnapshotSource{SnapshotID: &id}})
			newSnapshot(ns, b.Name, sandboxv1.SandboxSnapshotSpec{Source: sandboxv1.SandboxSnapshotSource{SnapshotID: &id}})
			waitSnapshotReady(a)
			waitSnapshotReady(b)
			deleteAndWait(a)
			Expect(emuSnapshot(id).Status).To(Equal(vercel.SnapshotCreated))
			expectEvent(a, "Normal Retained")
			deleteAndWait(b)
			Expect(emuSnapshot(id).Status).To(Equal(vercel.SnapshotCreated))
		})
	})

	Context("capturing a Sandbox", func() {
		It("waits for the Sandbox, captures it once (Vercel stops it), and a Sandbox boots from it with the files", func() {
			snapKey := types.NamespacedName{Namespace: ns, Name: "cap"}
			newSnapshot(ns, snapKey.Name, sandboxv1.SandboxSnapshotSpec{
				Source: sandboxv1.SandboxSnapshotSource{SandboxRef: &sandboxv1.LocalObjectReference{Name: "src"}},
			})
			Eventually(snapshotReason(snapKey)).Should(Equal(sandboxv1.ReasonSourceNotFound))

			By("making a Sandbox that boots from the snapshot wait for it")
			childKey := types.NamespacedName{Namespace: ns, Name: "child"}
			newSandbox(ns, childKey.Name, sandboxv1.SandboxSpec{Source: sandboxv1.SandboxSource{SnapshotRef: &sandboxv1.LocalObjectReference{Name: snapKey.Name}}})
			Eventually(readyCondition(childKey)).Should(And(Not(BeNil()), HaveField("Reason", sandboxv1.ReasonWaitingForSnapshot)))

			By("capturing the source once it runs")
			srcKey := types.NamespacedName{Namespace: ns, Name: "src"}
			newSandbox(ns, srcKey.Name, sandboxv1.SandboxSpec{Source: runtimeSource("node24"), Setup: []sandboxv1.SetupCommand{{
				Command: "sh", Args: []string{"-c", "echo captured > /vercel/sandbox/hello.txt && sleep 3"},
			}}})
			Eventually(snapshotReason(snapKey)).Should(Equal(sandboxv1.ReasonSourceNotRunning))
			Expect(meta.FindStatusCondition(getSnapshotObj(snapKey).Status.Conditions, sandboxv1.ConditionReady).Message).To(ContainSubstring(`Waiting for Sandbox "src" to be running`))

			snap := waitSnapshotReady(snapKey)
			oldSession := snap.Status.Capture.SessionID
			Expect(getSandbox(srcKey).Status.Setup.Completed).To(Equal(int32(1)), "captured only after setup finished")
			id := snap.Status.SnapshotID
			Expect(snap.Status.Capture).NotTo(BeNil())
			Expect(snap.Status.Capture.SessionID).To(Equal(oldSession))
			Expect(snap.Status.Capture.ResumedSessionID).To(BeEmpty())
			remote := emuSnapshot(id)
			Expect(remote.SourceSessionID).To(Equal(oldSession))
			Expect(remote.CreationMethod).To(Equal("manual"))
			Expect(recorder.requests("POST", "/sessions/"+oldSession+"/snapshot")).To(HaveLen(1))
			expectEvent(snapKey, "Normal SnapshotCreated")

			By("the source Sandbox re-observing Vercel: its session stopped and it resumes from the snapshot")
			Eventually(func(g Gomega) {
				s := getSandbox(srcKey)
				g.Expect(s.Annotations).To(HaveKey(sandboxv1.AnnotationReconcileRequestedAt))
				g.Expect(s.Status.CurrentSnapshotID).To(Equal(id))
			}).Should(Succeed())
			Expect(sessionStatus(oldSession)).To(Equal(vercel.SessionStopped))

			By("booting the waiting Sandbox from the snapshot, with the captured file")
			Eventually(func(g Gomega) {
				c := getSandbox(childKey)
				g.Expect(meta.IsStatusConditionTrue(c.Status.Conditions, sandboxv1.ConditionReady)).To(BeTrue(), "%s", mustJSON(c.Status))
			}).Should(Succeed())
			child := getSandbox(childKey)
			Expect(child.Status.BootedFrom).To(Equal(&sandboxv1.BootedFrom{SnapshotName: snapKey.Name, SnapshotID: id}))
			data, err := vc.ReadFile(ctx, child.Status.SessionID, "/vercel/sandbox/hello.txt", "")
			Expect(err).NotTo(HaveOccurred())
			Expect(string(data)).To(Equal("captured\n"))

			By("never capturing again")
			Expect(recorder.requests("POST", "/sessions/"+oldSession+"/snapshot")).To(HaveLen(1))
			Consistently(func() int { return snapshotRequestsOf(getSandbox(srcKey).Status.VercelName) }, 2*pollInterval).Should(Equal(1))
		})

		It("finds its snapshot after the capture's answer was lost, instead of capturing twice", func() {
			srcKey := types.NamespacedName{Namespace: ns, Name: "lossy"}
			newSandbox(ns, srcKey.Name, sandboxv1.SandboxSpec{Source: runtimeSource("node24")})
			session := waitReady(srcKey).Status.SessionID
			// Vercel takes the snapshot, but the answer never arrives.
			emu.Faults().CommitThenFail("createSnapshot", 1, emulator.FailWith500)
			DeferCleanup(emu.Faults().Reset)

			snapKey := types.NamespacedName{Namespace: ns, Name: "lossy-snap"}
			newSnapshot(ns, snapKey.Name, sandboxv1.SandboxSnapshotSpec{
				Source: sandboxv1.SandboxSnapshotSource{SandboxRef: &sandboxv1.LocalObjectReference{Name: srcKey.Name}},
			})
			snap := waitSnapshotReady(snapKey)
			Expect(recorder.requests("POST", "/sessions/"+session+"/snapshot")).To(HaveLen(1), "captured once")
			var manual []string
			for _, s := range emu.Snapshots() {
				if s.SourceSessionID == session && s.CreationMethod == "manual" {
					manual = append(manual, s.ID)
				}
			}
			Expect(manual).To(Equal([]string{snap.Status.SnapshotID}))
			expectEvent(snapKey, "Warning Transient")
		})

		It("with keepSourceRunning resumes the source and both report the new session", func() {
			srcKey := types.NamespacedName{Namespace: ns, Name: "live"}
			newSandbox(ns, srcKey.Name, sandboxv1.SandboxSpec{Source: runtimeSource("node22")})
			oldSession := waitReady(srcKey).Status.SessionID

			snapKey := types.NamespacedName{Namespace: ns, Name: "live-snap"}
			newSnapshot(ns, snapKey.Name, sandboxv1.SandboxSnapshotSpec{
				Source:            sandboxv1.SandboxSnapshotSource{SandboxRef: &sandboxv1.LocalObjectReference{Name: srcKey.Name}},
				KeepSourceRunning: true,
				ExpirationSeconds: ptr.To[int64](0),
			})
			snap := waitSnapshotReady(snapKey)
			Expect(snap.Status.Capture.ResumedSessionID).To(MatchRegexp(`^sbx_`))
			Expect(snap.Status.Capture.ResumedSessionID).NotTo(Equal(oldSession))
			Expect(snap.Status.ExpiresAt).To(BeNil(), "expirationSeconds 0 never expires")
			Expect(emuSnapshot(snap.Status.SnapshotID).ExpiresAt).To(BeZero())
			expectEvent(snapKey, "Normal Resumed")
			Expect(sessionStatus(snap.Status.Capture.ResumedSessionID)).To(Equal(vercel.SessionRunning))

			Eventually(func(g Gomega) {
				s := getSandbox(srcKey)
				g.Expect(s.Status.SessionID).To(Equal(snap.Status.Capture.ResumedSessionID))
				g.Expect(s.Status.Phase).To(Equal(sandboxv1.SandboxRunning))
			}).Should(Succeed())
		})
	})
})

func newSnapshot(ns, name string, spec sandboxv1.SandboxSnapshotSpec) *sandboxv1.SandboxSnapshot {
	s := &sandboxv1.SandboxSnapshot{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: spec}
	Expect(k8sClient.Create(context.Background(), s)).To(Succeed())
	return s
}

func getSnapshotObj(key types.NamespacedName) *sandboxv1.SandboxSnapshot {
	s := &sandboxv1.SandboxSnapshot{}
	Expect(k8sClient.Get(context.Background(), key, s)).To(Succeed())
	return s
}

func waitSnapshotReady(key types.NamespacedName, timeout ...time.Duration) *sandboxv1.SandboxSnapshot {
	t := 60 * time.Second
	if len(timeout) > 0 {
		t = timeout[0]
	}
	Eventually(func(g Gomega) {
		s := &sandboxv1.SandboxSnapshot{}
		g.Expect(k8sClient.Get(context.Background(), key, s)).To(Succeed())
		g.Expect(s.Status.ReadyToUse).To(BeTrue(), "status: %+v", s.Status)
	}, t).Should(Succeed())
	return getSnapshotObj(key)
}

// snapshotReason returns the reason of the SandboxSnapshot's Ready condition.
func snapshotReason(key types.NamespacedName) func() string {
	return func() string {
		s := &sandboxv1.SandboxSnapshot{}
		if err := k8sClient.Get(context.Background(), key, s); err != nil {
			return err.Error()
		}
		if c := meta.FindStatusCondition(s.Status.Conditions, sandboxv1.ConditionReady); c != nil {
			return c.Reason
		}
		return ""
	}
}

func deleteAndWait(key types.NamespacedName) {
	s := &sandboxv1.SandboxSnapshot{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}
	Expect(k8sClient.Delete(context.Background(), s)).To(Succeed())
	Eventually(func() bool {
		return apierrors.IsNotFound(k8sClient.Get(context.Background(), key, &sandboxv1.SandboxSnapshot{}))
	}).Should(BeTrue())
}

// vercelSnapshot makes a Vercel snapshot outside the operator: a sandbox,
// optionally with files, captured and deleted.
func vercelSnapshot(ctx context.Context, name string, files []vercel.File) string {
	resp, err := vc.CreateSandbox(ctx, vercel.CreateSandboxRequest{Name: name, Runtime: "node24"})
	Expect(err).NotTo(HaveOccurred())
	if files != nil {
		Expect(vc.WriteFiles(ctx, resp.Session.ID, files)).To(Succeed())
	}
	snap, err := vc.CreateSnapshot(ctx, resp.Session.ID, nil)
	Expect(err).NotTo(HaveOccurred())
	_, err = vc.DeleteSandbox(ctx, name, false)
	Expect(err).NotTo(HaveOccurred())
	return snap.Snapshot.ID
}

func emuSnapshot(id string) vercel.Snapshot {
	for _, s := range emu.Snapshots() {
		if s.ID == id {
			return s
		}
	}
	Fail("no emulator snapshot " + id)
	return vercel.Snapshot{}
}

func sessionStatus(id string) vercel.SessionStatus {
	for _, s := range emu.Sessions() {
		if s.ID == id {
			return s.Status
		}
	}
	return ""
}

// snapshotRequestsOf counts the snapshot requests for the sessions of a live
// Vercel sandbox.
func snapshotRequestsOf(vercelName string) int {
	n := 0
	for _, s := range emu.Sessions() {
		if s.SourceSandboxName == vercelName {
			n += len(recorder.requests("POST", "/sessions/"+s.ID+"/snapshot"))
		}
	}
	return n
}

// runIn runs a shell script (with positional args) in a session and returns
// its stdout.
func runIn(ctx context.Context, session, script string, args ...string) string {
	cmd, err := vc.RunCommand(ctx, session, vercel.RunCommandRequest{Command: "sh", Args: append([]string{"-c", script, "sh"}, args...), Env: map[string]string{}})
	Expect(err).NotTo(HaveOccurred())
	stdout, stderr, err := vc.ReadAllLogs(ctx, session, cmd.ID)
	Expect(err).NotTo(HaveOccurred(), stderr)
	return stdout
}

// gitHTTPRepo serves a bare copy of a new repository over git's dumb HTTP
// protocol, requiring basic auth with user and password.
func gitHTTPRepo(files map[string]string, user, password string) string {
	work := gitRepo(files)
	bare := filepath.Join(GinkgoT().TempDir(), "repo.git")
	for _, args := range [][]string{{"clone", "-q", "--bare", work, bare}, {"--git-dir", bare, "update-server-info"}} {
		out, err := exec.Command("git", args...).CombinedOutput()
		Expect(err).NotTo(HaveOccurred(), string(out))
	}
	fs := http.StripPrefix("/repo.git/", http.FileServer(http.Dir(bare)))
	return gitRepos.add(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u, p, ok := r.BasicAuth()
		if !ok || u != user || p != password {
			w.Header().Set("WWW-Authenticate", `Basic realm="git"`)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		fs.ServeHTTP(w, r)
	})) + "/repo.git"
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	Expect(err).NotTo(HaveOccurred())
	return string(b)
}

var _ = Describe("SandboxSnapshot recipes", func() {
	ctx := context.Background()
	var ns string
	BeforeEach(func() { ns = newNamespace() })

	node := func(rt string) *sandboxv1.Runtime { r := sandboxv1.Runtime(rt); return &r }
	sh := func(name, script string) sandboxv1.RecipeCommand {
		return sandboxv1.RecipeCommand{Name: name, Command: "sh", Args: []string{"-c", script}}
	}
	recipeSpec := func(r sandboxv1.SnapshotRecipe) sandboxv1.SandboxSnapshotSpec {
		return sandboxv1.SandboxSnapshotSpec{Source: sandboxv1.SandboxSnapshotSource{Recipe: &r}}
	}
	// bootFrom creates a Sandbox from the SandboxSnapshot and returns its session.
	bootFrom := func(name, snapName string) string {
		key := types.NamespacedName{Namespace: ns, Name: name}
		newSandbox(ns, name, sandboxv1.SandboxSpec{Source: sandboxv1.SandboxSource{SnapshotRef: &sandboxv1.LocalObjectReference{Name: snapName}}})
		return waitReady(key).Status.SessionID
	}
	builderCreates := func() int {
		n := 0
		for _, r := range recorder.requests("POST", "/sandboxes") {
			if strings.Contains(string(r.Body), `"name":"`+ns+`-build-`) {
				n++
			}
		}
		return n
	}
	liveBuilders := func() []string {
		var out []string
		for _, sb := range emu.LiveSandboxes() {
			if strings.HasPrefix(sb.Name, ns+"-build-") {
				out = append(out, sb.Name)
			}
		}
		return out
	}

	It("clones a private repository and runs setup in a builder; a Sandbox booted from the snapshot has the files and no credential", func() {
		const user, password = "builder-bot", "gh-token-4f9a2c7e1b"
		url := gitHTTPRepo(map[string]string{"README.md": "hello from the recipe repo\n"}, user, password)
		Expect(k8sClient.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "git-creds"},
			StringData: map[string]string{"username": user, "password": password},
		})).To(Succeed())
		key := types.NamespacedName{Namespace: ns, Name: "workspace"}
		newSnapshot(ns, key.Name, recipeSpec(sandboxv1.SnapshotRecipe{
			Runtime:      node("node24"),
			Repositories: []sandboxv1.RecipeRepository{{URL: url, Path: "app", Credentials: &sandboxv1.GitCredentials{SecretName: "git-creds"}}},
			Env:          []sandboxv1.RecipeEnvVar{{Name: "GREETING", Value: "hi"}},
			Setup: []sandboxv1.RecipeCommand{sh("build",
				`echo "$GREETING built from $(cat /vercel/sandbox/app/README.md)" > /vercel/sandbox/out.txt && env > /vercel/sandbox/setup-env.txt`)},
		}))
		snap := waitSnapshotReady(key, 90*time.Second)
		st := snap.Status
		Expect(st.Phase).To(Equal(sandboxv1.SnapshotReady))
		Expect(st.ContentHash).To(MatchRegexp(`^[0-9a-f]{64}$`))
		Expect(snap.Labels).To(HaveKeyWithValue(sandboxv1.LabelContentHash, st.ContentHash[:12]))
		Expect(st.Build).NotTo(BeNil())
		Expect(st.Build.CompletedSteps).To(Equal(int32(2)))
		Expect(st.Build.TotalSteps).To(Equal(int32(2)))
		Expect(st.Build.DurationSeconds).NotTo(BeNil())
		Expect(st.Build.BuilderName).To(BeEmpty(), "the builder is deleted")
		Expect(liveBuilders()).To(BeEmpty())
		Expect(builderCreates()).To(Equal(1))
		Eventually(func() string { return strings.Join(eventsFor(key), "\n") }).Should(And(
			ContainSubstring("Normal BuildStarted"), ContainSubstring("Normal StepStarted"),
			ContainSubstring("Normal SnapshotCreated"), ContainSubstring("Normal Built")))

		By("booting a Sandbox from it: the clone and the setup output are there")
		session := bootFrom("dev", key.Name)
		readme, err := vc.ReadFile(ctx, session, "/vercel/sandbox/app/README.md", "")
		Expect(err).NotTo(HaveOccurred())
		Expect(string(readme)).To(Equal("hello from the recipe repo\n"))
		out, err := vc.ReadFile(ctx, session, "/vercel/sandbox/out.txt", "")
		Expect(err).NotTo(HaveOccurred())
		Expect(string(out)).To(Equal("hi built from hello from the recipe repo\n"))

		By("finding the credentials in neither the setup environment nor the captured filesystem")
		env, err := vc.ReadFile(ctx, session, "/vercel/sandbox/setup-env.txt", "")
		Expect(err).NotTo(HaveOccurred())
		Expect(string(env)).To(ContainSubstring("GREETING=hi"))
		Expect(string(env)).NotTo(Or(ContainSubstring(password), ContainSubstring(user), ContainSubstring("GIT_PASSWORD")))
		gitConfig, err := vc.ReadFile(ctx, session, "/vercel/sandbox/app/.git/config", "")
		Expect(err).NotTo(HaveOccurred())
		Expect(string(gitConfig)).To(ContainSubstring(url))
		Expect(string(gitConfig)).NotTo(ContainSubstring(password))
		Expect(runIn(ctx, session, `grep -rlF -e "$1" -e "$2" /vercel /tmp /home /root /var 2>/dev/null; echo scanned`, password, user)).To(Equal("scanned\n"))
		Expect(runIn(ctx, session, `env`)).NotTo(ContainSubstring(password))
		Expect(mustJSON(getSnapshotObj(key).Status)).NotTo(ContainSubstring(password))
		Expect(strings.Join(eventsFor(key), "\n")).NotTo(ContainSubstring(password))
		Expect(logs.String()).NotTo(ContainSubstring(password))
	})

	It("shares one build and one Vercel snapshot between equal recipes, kept as long as either asks, and deletes it with its last user", func() {
		a := types.NamespacedName{Namespace: ns, Name: "a"}
		b := types.NamespacedName{Namespace: ns, Name: "b"}
		specA := recipeSpec(sandboxv1.SnapshotRecipe{
			Runtime: node("node22"),
			Env:     []sandboxv1.RecipeEnvVar{{Name: "X", Value: "1"}, {Name: "Y", Value: "2"}},
			Setup:   []sandboxv1.RecipeCommand{sh("one", `echo shared > /vercel/sandbox/s.txt; sleep 1`)},
		})
		specA.ExpirationSeconds = ptr.To[int64](3600)
		newSnapshot(ns, a.Name, specA)
		// Written differently, equal in content; a longer expiration than the
		// driver's.
		specB := recipeSpec(sandboxv1.SnapshotRecipe{
			Runtime: node("node22"),
			Env:     []sandboxv1.RecipeEnvVar{{Name: "Y", Value: "2"}, {Name: "X", Value: "1"}},
			Setup:   []sandboxv1.RecipeCommand{{Name: "another name", Command: "sh", Args: []string{"-c", `echo shared > /vercel/sandbox/s.txt; sleep 1`}, Cwd: "/vercel/sandbox/", TimeoutSeconds: ptr.To[int32](60)}},
		})
		specB.ExpirationSeconds = ptr.To[int64](7200)
		newSnapshot(ns, b.Name, specB)
		sa, sb := waitSnapshotReady(a, 90*time.Second), waitSnapshotReady(b, 90*time.Second)
		Expect(sa.Status.ContentHash).To(Equal(sb.Status.ContentHash))
		Expect(sa.Status.SnapshotID).To(Equal(sb.Status.SnapshotID))
		id := sa.Status.SnapshotID
		Expect(builderCreates()).To(Equal(1), "one build")
		shared := emuSnapshot(id)
		Expect(recorder.requests("POST", "/sessions/"+shared.SourceSessionID+"/snapshot")).To(HaveLen(1), "one Vercel snapshot")
		expectEvent(b, "Normal Shared")
		Expect(sa.Status.Provenance).To(And(HaveField("Origin", sandboxv1.SnapshotBuilt), HaveField("SourceSessionID", shared.SourceSessionID)))
		Expect(sb.Status.Provenance).To(And(HaveField("Origin", sandboxv1.SnapshotBuilt), HaveField("SourceSessionID", shared.SourceSessionID)))
		Expect(time.Duration(shared.ExpiresAt-shared.CreatedAt)*time.Millisecond).To(Equal(2*time.Hour), "the longer expiration of the two users")

		By("deleting one user: the artifact stays for the other")
		deleteAndWait(a)
		Expect(emuSnapshot(id).Status).To(Equal(vercel.SnapshotCreated))
		expectEvent(a, "Normal Kept")
		Consistently(func() bool { return getSnapshotObj(b).Status.ReadyToUse }, pollInterval+time.Second).Should(BeTrue())

		By("deleting the last user: the artifact is deleted")
		deleteAndWait(b)
		Expect(emuSnapshot(id).Status).To(Equal(vercel.SnapshotDeleted))
	})

	// twoSteps is a recipe whose first step takes 3 s: a window to act in
	// mid-build.
	twoSteps := func() sandboxv1.SandboxSnapshotSpec {
		return recipeSpec(sandboxv1.SnapshotRecipe{
			Runtime: node("node24"),
			Setup: []sandboxv1.RecipeCommand{
				sh("first", `echo one >> /vercel/sandbox/log.txt; sleep 3`),
				sh("second", `echo two >> /vercel/sandbox/log.txt`),
			},
		})
	}
	// inFirstStep waits until the build of key runs twoSteps' first step and
	// returns the builder's session.
	inFirstStep := func(key types.NamespacedName) string {
		var session string
		Eventually(func(g Gomega) {
			b := getSnapshotObj(key).Status.Build
			g.Expect(b).NotTo(BeNil())
			g.Expect(b.Step).To(HavePrefix("setup 1/2"))
			session = b.SessionID
		}).Should(Succeed())
		Expect(session).NotTo(BeEmpty())
		return session
	}
	// expectBuiltOnce checks that twoSteps ran each step once, in one
	// builder, and that a Sandbox booted from key has the output of both.
	expectBuiltOnce := func(key types.NamespacedName, session string) {
		Expect(builderCreates()).To(Equal(1), "one builder")
		Expect(recorder.requests("POST", "/sessions/"+session+"/cmd")).To(HaveLen(2), "each step started once")
		Expect(liveBuilders()).To(BeEmpty())
		log, err := vc.ReadFile(ctx, bootFrom(key.Name+"-boot", key.Name), "/vercel/sandbox/log.txt", "")
		Expect(err).NotTo(HaveOccurred())
		Expect(string(log)).To(Equal("one\ntwo\n"))
	}

	It("continues a build after a manager restart from its last finished step, with no second builder", func() {
		key := types.NamespacedName{Namespace: ns, Name: "restart"}
		newSnapshot(ns, key.Name, twoSteps())
		session := inFirstStep(key)
		restartManager()
		waitSnapshotReady(key, 90*time.Second)
		expectBuiltOnce(key, session)
	})

	It("hands a shared build over when the object driving it is deleted: the other user finishes it in the same builder", func() {
		a := types.NamespacedName{Namespace: ns, Name: "driver"}
		b := types.NamespacedName{Namespace: ns, Name: "taker"}
		newSnapshot(ns, a.Name, twoSteps())
		session := inFirstStep(a)
		newSnapshot(ns, b.Name, twoSteps())
		Eventually(func(g Gomega) {
			build := getSnapshotObj(b).Status.Build
			g.Expect(build).NotTo(BeNil())
			g.Expect(build.SharedWith).To(Equal(a.Name))
		}).Should(Succeed())

		By("deleting the driver mid-build")
		deleteAndWait(a)
		sb := waitSnapshotReady(b, 90*time.Second)
		Expect(sb.Status.Build.SharedWith).To(BeEmpty())
		expectBuiltOnce(b, session)
	})

	It("layers a recipe on another SandboxSnapshot: waits for it, boots the builder from it, and hashes its base", func() {
		layer := types.NamespacedName{Namespace: ns, Name: "layer"}
		newSnapshot(ns, layer.Name, recipeSpec(sandboxv1.SnapshotRecipe{
			BaseSnapshotRef: &sandboxv1.LocalObjectReference{Name: "base"},
			Setup:           []sandboxv1.RecipeCommand{sh("layer", "cat /vercel/sandbox/base.txt > /vercel/sandbox/layer.txt; echo layer >> /vercel/sandbox/layer.txt")},
		}))
		Eventually(snapshotReason(layer)).Should(Equal(sandboxv1.ReasonBaseSnapshotNotFound))

		base := types.NamespacedName{Namespace: ns, Name: "base"}
		newSnapshot(ns, base.Name, recipeSpec(sandboxv1.SnapshotRecipe{
			Runtime: node("node24"),
			Setup:   []sandboxv1.RecipeCommand{sh("base", "echo base > /vercel/sandbox/base.txt")},
		}))
		baseSt := waitSnapshotReady(base, 90*time.Second).Status
		layerSt := waitSnapshotReady(layer, 90*time.Second).Status
		Expect(layerSt.ContentHash).NotTo(Equal(baseSt.ContentHash))
		Expect(layerSt.SnapshotID).NotTo(Equal(baseSt.SnapshotID))
		var sent vercel.CreateSandboxRequest
		for _, r := range recorder.requests("POST", "/sandboxes") {
			if strings.Contains(string(r.Body), `"name":"`+controllers.BuilderName(clusterID, ns, layerSt.ContentHash, "")) {
				Expect(json.Unmarshal(r.Body, &sent)).To(Succeed())
			}
		}
		Expect(sent.Source).NotTo(BeNil())
		Expect(sent.Source.SnapshotID).To(Equal(baseSt.SnapshotID))

		out, err := vc.ReadFile(ctx, bootFrom("layered", layer.Name), "/vercel/sandbox/layer.txt", "")
		Expect(err).NotTo(HaveOccurred())
		Expect(string(out)).To(Equal("base\nlayer\n"))
	})

	It("deletes the builder of a build its base's new content cut short before building anew", func() {
		base := types.NamespacedName{Namespace: ns, Name: "base"}
		baseRecipe := func(content string) sandboxv1.SandboxSnapshotSpec {
			return recipeSpec(sandboxv1.SnapshotRecipe{Runtime: node("node24"), Setup: []sandboxv1.RecipeCommand{sh("base", "echo "+content+" > /vercel/sandbox/base.txt")}})
		}
		newSnapshot(ns, base.Name, baseRecipe("one"))
		waitSnapshotReady(base, 90*time.Second)
		layer := types.NamespacedName{Namespace: ns, Name: "layer"}
		newSnapshot(ns, layer.Name, recipeSpec(sandboxv1.SnapshotRecipe{
			BaseSnapshotRef: &sandboxv1.LocalObjectReference{Name: "base"},
			Setup:           []sandboxv1.RecipeCommand{sh("slow", "sleep 20")},
		}))
		var first string
		Eventually(func(g Gomega) {
			b := getSnapshotObj(layer).Status.Build
			g.Expect(b).NotTo(BeNil())
			g.Expect(b.BuilderName).NotTo(BeEmpty())
			first = b.BuilderName
			g.Expect(liveBuilders()).To(ContainElement(first))
		}, 60*time.Second).Should(Succeed())

		By("replacing the base with other content while the layer builds")
		deleteAndWait(base)
		newSnapshot(ns, base.Name, baseRecipe("two"))
		waitSnapshotReady(base, 90*time.Second)
		Eventually(func() string { return getSnapshotObj(layer).Status.Build.BuilderName }, 30*time.Second).ShouldNot(Equal(first))
		Eventually(liveBuilders, 15*time.Second).ShouldNot(ContainElement(first), "the cut-short build's builder is deleted")
		deleteAndWait(layer)
		Eventually(liveBuilders).Should(BeEmpty())
	})

	It("reports a failed step with its exit code and output, deletes the builder and does not retry", func() {
		key := types.NamespacedName{Namespace: ns, Name: "broken"}
		newSnapshot(ns, key.Name, recipeSpec(sandboxv1.SnapshotRecipe{
			Runtime: node("node24"),
			Setup:   []sandboxv1.RecipeCommand{sh("ok", "true"), sh("compile", `echo "error: missing semicolon"; exit 3`)},
		}))
		Eventually(func(g Gomega) {
			s := getSnapshotObj(key)
			g.Expect(s.Status.Phase).To(Equal(sandboxv1.SnapshotFailed))
			c := meta.FindStatusCondition(s.Status.Conditions, sandboxv1.ConditionReady)
			g.Expect(c.Reason).To(Equal(sandboxv1.ReasonBuildFailed))
			g.Expect(c.Message).To(And(ContainSubstring("setup 2/2 (compile)"), ContainSubstring("exited with code 3"), ContainSubstring("error: missing semicolon")))
		}, 60*time.Second).Should(Succeed())
		expectEvent(key, "Warning BuildFailed")
		Expect(liveBuilders()).To(BeEmpty())
		Consistently(builderCreates, 2*pollInterval).Should(Equal(1))
	})

	It("turns Expired when its expiry passes, then rebuilds it", func() {
		key := types.NamespacedName{Namespace: ns, Name: "short-lived"}
		spec := recipeSpec(sandboxv1.SnapshotRecipe{Runtime: node("node24"), Setup: []sandboxv1.RecipeCommand{sh("mark", "date > /vercel/sandbox/built-at")}})
		spec.ExpirationSeconds = ptr.To[int64](3600) // the shortest the CRD allows
		newSnapshot(ns, key.Name, spec)
		first := waitSnapshotReady(key, 90*time.Second).Status
		Expect(first.ExpiresAt).NotTo(BeNil())
		Expect(emuSnapshot(first.SnapshotID).ExpiresAt).To(BeNumerically(">", 0))
		agePast(first.ExpiresAt.Time)
		Eventually(func(g Gomega) {
			st := getSnapshotObj(key).Status
			g.Expect(st.SnapshotID).NotTo(Equal(first.SnapshotID))
			g.Expect(st.ReadyToUse).To(BeTrue())
		}, 60*time.Second).Should(Succeed())
		snapshotClock.Set(0)
		// Expired by the controller's clock, not yet Vercel's: the controller
		// retires it once the new one serves.
		Eventually(func() vercel.SnapshotStatus { return emuSnapshot(first.SnapshotID).Status }).Should(Equal(vercel.SnapshotDeleted))
		expectEvent(key, "Warning Expired")
		Expect(builderCreates()).To(BeNumerically(">=", 2))
		deleteAndWait(key)
	})

	It("rebuilds a snapshot older than maxAgeSeconds with no gap in readiness, then retires the old one", func() {
		key := types.NamespacedName{Namespace: ns, Name: "fresh"}
		spec := recipeSpec(sandboxv1.SnapshotRecipe{Runtime: node("node24"), Setup: []sandboxv1.RecipeCommand{sh("slow", "sleep 2; date > /vercel/sandbox/built-at")}})
		spec.MaxAgeSeconds = ptr.To[int64](3600) // the shortest the CRD allows
		newSnapshot(ns, key.Name, spec)
		ready := waitSnapshotReady(key, 90*time.Second).Status
		first := ready.SnapshotID
		agePast(ready.CreatedAt.Add(time.Hour))
		sawRebuilding := false
		deadline := time.Now().Add(60 * time.Second)
		for {
			s := getSnapshotObj(key)
			Expect(s.Status.ReadyToUse).To(BeTrue(), "readiness gap: %s", mustJSON(s.Status))
			if c := meta.FindStatusCondition(s.Status.Conditions, sandboxv1.ConditionReady); c != nil && c.Reason == sandboxv1.ReasonRebuilding {
				sawRebuilding = true
			}
			if s.Status.SnapshotID != first {
				snapshotClock.Set(0)
				break
			}
			Expect(time.Now()).To(BeTemporally("<", deadline), "no rebuild")
			time.Sleep(50 * time.Millisecond)
		}
		Expect(sawRebuilding).To(BeTrue())
		Eventually(func() vercel.SnapshotStatus { return emuSnapshot(first).Status }).Should(Equal(vercel.SnapshotDeleted))
		expectEvent(key, "Normal Retired")
		deleteAndWait(key)
	})
})

// agePast moves the SandboxSnapshot controller's clock to just past t, a time
// about an hour ahead, until the spec ends. It first lets a few seconds pass,
// so that a snapshot built after this call is still younger than the one
// whose time t is: the clock then reads past t, but not yet past the same
// moment of the new snapshot, and exactly one rebuild starts.
func agePast(t time.Time) {
	GinkgoHelper()
	DeferCleanup(func() { snapshotClock.Set(0) })
	time.Sleep(6 * time.Second)
	snapshotClock.Set(time.Until(t) + 2*time.Second)
}

var _ = Describe("SandboxSnapshot samples", func() {
	It("are accepted by the API server", func() {
		ns := newNamespace()
		out, err := kubectl("apply", "--dry-run=server", "-n", ns, "-f", "config/samples/snapshots/")
		Expect(err).NotTo(HaveOccurred(), out)
		Expect(out).To(ContainSubstring("sandboxsnapshot.sandbox.sentry.io/workspace created (server dry run)"))
	})
})
