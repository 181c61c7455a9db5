package controllers_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
	"github.com/getsentry/sandbox-controller/controllers"
	"github.com/getsentry/sandbox-controller/internal/notify"
	"github.com/getsentry/sandbox-controller/internal/vercel"
	"github.com/getsentry/sandbox-controller/localstack"
	"github.com/getsentry/sandbox-controller/localstack/emulator"
)

// The suite runs the manager as cmd/manager wires it (controllers.SetupWithManager)
// against a real kube-apiserver (envtest) and the real Vercel client against the
// emulator over loopback. A recording proxy between the two lets specs assert
// what Vercel received.
//
// In parallel (`make test`: ginkgo --procs), every process starts a local stack
// of its own in BeforeSuite (API server, etcd, kube-controller-manager, emulator,
// proxy, manager) and runs one spec at a time on it: a spec may restart the
// manager, inject emulator faults, create cluster-scoped objects (a default
// SandboxClass) or move the snapshot clock without the specs of the other
// processes seeing it. Mark a spec Serial only if it needs the machine alone.
var (
	cfg       *rest.Config
	k8sClient client.Client
	emu       *emulator.Emulator
	recorder  *recordingProxy
	vc        *vercel.Client
	// classBase is the manager's Vercel configuration (the recording
	// proxy's URL, the stack's token, team and project); the SandboxClasses'
	// clients start from it with the credentials of the classes' Secrets.
	classBase      vercel.Config
	writes         = &writeCounter{counts: map[types.NamespacedName]int{}}
	logs           = &syncBuffer{}
	kubeconfigPath string
	repoRoot       string

	// clusterID is the suite's cluster id, derived as the manager derives
	// it by default.
	clusterID string

	stack *localstack.Stack

	mgrMu sync.Mutex
	mgr   *localstack.Manager // the manager running, nil between stop and start
)

const pollInterval = 2 * time.Second

// longSpec marks the specs that wait longest (fixed windows of 45 s to 90 s):
// in parallel, Ginkgo starts them first, so that none of them begins last and
// keeps one process running after the others finished.
var longSpec = SpecPriority(1)

// referenceDeadline is the managers' --reference-deadline: short, so that the
// specs of unresolved references see an object fail.
const referenceDeadline = 10 * time.Second

// snapshotClock is the SandboxSnapshot controller's clock: real time plus an
// offset that a spec moves forward to age a snapshot by an hour
// (maxAgeSeconds and expirationSeconds are at least that) without waiting.
var snapshotClock = &offsetClock{}

// gitRepos serves the specs' git repositories (githost_test.go).
var gitRepos *gitHost

type offsetClock struct{ offset atomic.Int64 }

func (c *offsetClock) Now() time.Time { return time.Now().Add(time.Duration(c.offset.Load())) }

// Set makes Now read real time plus d.
func (c *offsetClock) Set(d time.Duration) { c.offset.Store(int64(d)) }

func TestControllers(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "Controllers Suite")
}

var _ = BeforeSuite(func() {
	ctrl.SetLogger(zap.New(zap.WriteTo(io.MultiWriter(GinkgoWriter, logs)), zap.UseDevMode(true)))
	SetDefaultEventuallyTimeout(30 * time.Second)
	SetDefaultEventuallyPollingInterval(100 * time.Millisecond)

	var err error
	repoRoot, err = filepath.Abs("..")
	Expect(err).NotTo(HaveOccurred())
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	Expect(assets).NotTo(BeEmpty(), "KUBEBUILDER_ASSETS is not set: run `make test`, which builds the envtest binaries with hack/envtest.sh")

	// The local stack: the CRDs and the admission policy as `make install`
	// installs them, kube-controller-manager beside the API server (garbage
	// collection of fork children, namespace deletion) as on a cluster, and
	// the emulator.
	gitRepos, err = newGitHost()
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(gitRepos.close)
	stack, err = localstack.Start(context.Background(), localstack.Options{
		RepoRoot:          repoRoot,
		AssetsDir:         assets,
		ControllerManager: true,
		// The emulator serves the public routes, so readiness probes reach
		// servers that commands start in a sandbox.
		Emulator: emulator.Options{DataDir: GinkgoT().TempDir(), ServeRoutes: true,
			// Two tenants for the SandboxClass specs, each with its own
			// token, team and project (classes_test.go).
			Credentials: tenantCredentials,
			// Recipe builders clone the specs' repositories by name.
			Egress: emulator.EgressOptions{Hosts: map[string]string{gitHostName: gitRepos.ln.Addr().String()}}},
	})
	Expect(err).NotTo(HaveOccurred())
	// Registered at once, so a failure later in this setup does not leave
	// the control plane running. Cleanups run last-registered first.
	DeferCleanup(func() { Expect(stack.Stop()).To(Succeed()) })
	cfg, k8sClient, emu = stack.Config, stack.Client, stack.Emulator
	scheme := stack.Scheme

	kubeconfigPath = filepath.Join(GinkgoT().TempDir(), "kubeconfig")
	Expect(stack.ControlPlane.WriteAdminKubeconfig(kubeconfigPath)).To(Succeed())

	recorder = newRecordingProxy(stack.EmulatorURL)
	DeferCleanup(recorder.Close)

	classBase = stack.Vercel(recorder.URL())
	vc, err = vercel.New(stack.Vercel(recorder.URL()))
	Expect(err).NotTo(HaveOccurred())
	clusterID, err = controllers.ClusterIDFromKubeSystem(context.Background(), k8sClient)
	Expect(err).NotTo(HaveOccurred())
	Expect(controllers.ValidateClusterID(clusterID)).To(Succeed())
	startManager(scheme)
	DeferCleanup(stopManager)
})

// A failed spec stops midway and leaves its objects behind, and some keep acting:
// a recipe with maxAgeSeconds rebuilds every few seconds. Deleting them keeps one
// failure from moving the Vercel traffic of the specs after it.
var _ = AfterEach(func() {
	if !CurrentSpecReport().Failed() {
		return
	}
	ctx := context.Background()
	for _, list := range []client.ObjectList{&sandboxv1.SandboxForkList{}, &sandboxv1.SandboxSnapshotList{}, &sandboxv1.SandboxList{}} {
		Expect(k8sClient.List(ctx, list)).To(Succeed())
		Expect(meta.EachListItem(list, func(obj runtime.Object) error {
			return client.IgnoreNotFound(k8sClient.Delete(ctx, obj.(client.Object)))
		})).To(Succeed())
	}
})

// suiteOptions are the suite manager's options: cmd/manager's defaults where
// they matter (16 reconciles of each kind, 4 Vercel requests in flight plus
// the reserved lane, the stalled-slots check), short intervals so that specs
// see polls and deadlines, and the test seams.
func suiteOptions() controllers.Options {
	// The test receivers listen on 127.0.0.1, which only an explicit
	// allow-list admits (--notify-allow-destinations); the rest of loopback
	// stays refused.
	notifyAllow, err := notify.ParseAllowList([]string{"127.0.0.1/32"})
	Expect(err).NotTo(HaveOccurred())
	return controllers.Options{
		MaxConcurrentReconciles: 16,
		VercelInFlight:          4,
		VercelReservedInFlight:  1,
		VercelStallThreshold:    5 * time.Minute,
		PollInterval:            pollInterval,
		ReferenceDeadline:       referenceDeadline,
		// A short request timeout, so that the spec of a hanging receiver
		// sees retries.
		Notify: notify.Options{Allow: notifyAllow, Timeout: time.Second, MinBackoff: 200 * time.Millisecond},
		// The seams: every write counted, the snapshots' clock movable, a
		// class's rotated Secret read within a second, the probes' routes.
		WrapClient:        func(c client.Client) client.Client { return countingClient{Client: c, w: writes} },
		SnapshotClock:     snapshotClock.Now,
		ClassSecretReload: time.Second,
		// The emulator serves the routes on its own URL, not the proxy's.
		RouteBase: emu.URL(),
	}
}

// startManager starts the suite's manager: controllers.SetupWithManager, as
// cmd/manager runs it, with suiteOptions, against the recording proxy.
func startManager(scheme *runtime.Scheme) {
	startManagerWith(scheme, classBase, suiteOptions())
}

// startManagerWith starts a manager wired by controllers.SetupWithManager
// (through the local stack, as `make dev` runs it) with vcfg and o, watching
// the given namespaces only (all when none), and returns once its
// controllers run.
func startManagerWith(scheme *runtime.Scheme, vcfg vercel.Config, o controllers.Options, namespaces ...string) {
	GinkgoHelper()
	mgrMu.Lock()
	defer mgrMu.Unlock()
	Expect(mgr).To(BeNil(), "a manager already runs")
	mgrOpts := ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache:                  controllers.CacheOptions(),
		// A restarted manager registers the same controller names again.
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	}
	if len(namespaces) > 0 {
		mgrOpts.Cache.DefaultNamespaces = map[string]cache.Config{}
		for _, ns := range namespaces {
			mgrOpts.Cache.DefaultNamespaces[ns] = cache.Config{}
		}
	}
	m, err := stack.StartManager(context.Background(), nil, mgrOpts, vcfg, o)
	Expect(err).NotTo(HaveOccurred())
	mgr = m
}

func stopManager() {
	GinkgoHelper()
	mgrMu.Lock()
	defer mgrMu.Unlock()
	m := mgr
	mgr = nil
	Expect(m).NotTo(BeNil(), "no manager runs")
	Expect(m.Stop()).To(Succeed())
}

// startWiredManager makes the suite's manager give way, for the rest of the
// spec, to one with vcfg and o (cmd/manager's wiring without the suite's
// options and seams: the Vercel in-flight slots o sets, the call timeout of
// vcfg), watching the given namespaces only.
func startWiredManager(vcfg vercel.Config, o controllers.Options, namespaces ...string) {
	GinkgoHelper()
	stopManager()
	DeferCleanup(func() { startManager(k8sClient.Scheme()) })
	startManagerWith(k8sClient.Scheme(), vcfg, o, namespaces...)
	DeferCleanup(stopManager)
}

// restartManager stops the manager and starts a new one, as a crash and
// restart of the operator would.
func restartManager() {
	stopManager()
	startManager(k8sClient.Scheme())
}

// writeCounter counts the API-server writes the reconciler makes, per object.
type writeCounter struct {
	mu     sync.Mutex
	counts map[types.NamespacedName]int
}

func (w *writeCounter) add(obj client.Object) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.counts[client.ObjectKeyFromObject(obj)]++
}

func (w *writeCounter) get(key types.NamespacedName) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.counts[key]
}

// countingClient is the manager's client with every write counted.
type countingClient struct {
	client.Client
	w *writeCounter
}

func (c countingClient) Create(ctx context.Context, obj client.Object, opts ...client.CreateOption) error {
	c.w.add(obj)
	return c.Client.Create(ctx, obj, opts...)
}

func (c countingClient) Update(ctx context.Context, obj client.Object, opts ...client.UpdateOption) error {
	c.w.add(obj)
	return c.Client.Update(ctx, obj, opts...)
}

func (c countingClient) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
	c.w.add(obj)
	return c.Client.Patch(ctx, obj, patch, opts...)
}

func (c countingClient) Status() client.SubResourceWriter {
	return countingStatus{SubResourceWriter: c.Client.Status(), w: c.w}
}

type countingStatus struct {
	client.SubResourceWriter
	w *writeCounter
}

func (s countingStatus) Update(ctx context.Context, obj client.Object, opts ...client.SubResourceUpdateOption) error {
	s.w.add(obj)
	return s.SubResourceWriter.Update(ctx, obj, opts...)
}

func (s countingStatus) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
	s.w.add(obj)
	return s.SubResourceWriter.Patch(ctx, obj, patch, opts...)
}

// recordingProxy forwards to the emulator and keeps every request body, so
// specs can assert what reached Vercel.
type recordingProxy struct {
	srv    *httptest.Server
	mu     sync.Mutex
	bodies []recordedRequest
	stalls []*stall
}

// stall is a request to pass on to Vercel and never answer.
type stall struct {
	match     func(recordedRequest) bool
	committed chan struct{}
}

type recordedRequest struct {
	Method, Path, Query string
	Body                []byte
}

func newRecordingProxy(target string) *recordingProxy {
	u, err := url.Parse(target)
	Expect(err).NotTo(HaveOccurred())
	p := &recordingProxy{}
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.FlushInterval = -1
	p.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		rec := recordedRequest{Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery, Body: body}
		p.mu.Lock()
		p.bodies = append(p.bodies, rec)
		st := p.takeStall(rec)
		p.mu.Unlock()
		if st == nil {
			rp.ServeHTTP(w, r)
			return
		}
		// Vercel applies it in full (the caller giving up does not cancel
		// it), but the answer never comes: the caller waits until it gives
		// up, as a manager stopping mid-call does.
		rp.ServeHTTP(httptest.NewRecorder(), r.WithContext(context.WithoutCancel(r.Context())))
		close(st.committed)
		<-r.Context().Done()
	}))
	return p
}

// stallAfterCommit makes the next request that match accepts reach Vercel
// and then get no answer, until the caller gives up. The channel is closed
// once Vercel has applied it. This is the window between a Vercel call and
// the status write that records its result, which a crash leaves open.
func (p *recordingProxy) stallAfterCommit(match func(recordedRequest) bool) <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	st := &stall{match: match, committed: make(chan struct{})}
	p.stalls = append(p.stalls, st)
	return st.committed
}

func (p *recordingProxy) takeStall(r recordedRequest) *stall {
	for i, st := range p.stalls {
		if st.match(r) {
			p.stalls = append(p.stalls[:i], p.stalls[i+1:]...)
			return st
		}
	}
	return nil
}

func (p *recordingProxy) URL() string { return p.srv.URL }
func (p *recordingProxy) Close()      { p.srv.Close() }

// requests returns the recorded requests whose path contains substr.
func (p *recordingProxy) requests(method, substr string) []recordedRequest {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []recordedRequest
	for _, r := range p.bodies {
		if r.Method == method && strings.Contains(r.Path, substr) {
			out = append(out, r)
		}
	}
	return out
}

type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

var nsCounter atomic.Int64

// newNamespace creates a namespace of its own for one spec.
func newNamespace() string {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("spec-%d-%d", GinkgoParallelProcess(), nsCounter.Add(1))}}
	Expect(k8sClient.Create(context.Background(), ns)).To(Succeed())
	// What a spec leaves running keeps polling Vercel every pollInterval,
	// and in a process that ran a hundred specs the leftovers (up to 60
	// running Sandboxes) took the Vercel slots and workers of the specs
	// after them. Deleting the namespace when the spec ends (the
	// namespace controller deletes its objects, and their finalizers
	// delete the Vercel side) keeps every spec starting on a quiet stack.
	DeferCleanup(func() {
		Expect(client.IgnoreNotFound(k8sClient.Delete(context.Background(), ns))).To(Succeed())
	})
	return ns.Name
}

func newSandbox(ns, name string, spec sandboxv1.SandboxSpec) *sandboxv1.Sandbox {
	sbx := &sandboxv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: spec}
	Expect(k8sClient.Create(context.Background(), sbx)).To(Succeed())
	return sbx
}

func runtimeSource(rt string) sandboxv1.SandboxSource {
	r := sandboxv1.Runtime(rt)
	return sandboxv1.SandboxSource{Runtime: &r}
}

// readyCondition fetches the Sandbox and returns its Ready condition (nil
// when it has none yet).
func readyCondition(key types.NamespacedName) func(Gomega) *metav1.Condition {
	return func(g Gomega) *metav1.Condition {
		sbx := &sandboxv1.Sandbox{}
		g.Expect(k8sClient.Get(context.Background(), key, sbx)).To(Succeed())
		return meta.FindStatusCondition(sbx.Status.Conditions, sandboxv1.ConditionReady)
	}
}

func getSandbox(key types.NamespacedName) *sandboxv1.Sandbox {
	sbx := &sandboxv1.Sandbox{}
	Expect(k8sClient.Get(context.Background(), key, sbx)).To(Succeed())
	return sbx
}

func waitReady(key types.NamespacedName) *sandboxv1.Sandbox {
	Eventually(readyCondition(key)).Should(And(Not(BeNil()), HaveField("Status", metav1.ConditionTrue)))
	return getSandbox(key)
}

// eventsFor lists the events about one object, as "Type Reason: note".
func eventsFor(key types.NamespacedName) []string {
	list := &eventsv1.EventList{}
	Expect(k8sClient.List(context.Background(), list, client.InNamespace(key.Namespace))).To(Succeed())
	var out []string
	for _, e := range list.Items {
		if e.Regarding.Name == key.Name {
			out = append(out, fmt.Sprintf("%s %s: %s", e.Type, e.Reason, e.Note))
		}
	}
	return out
}

// expectEvent waits for an event about key whose "Type Reason: note" contains want.
// It waits because the recorder sends events asynchronously: one may land after the
// status or Vercel state the spec has already seen.
func expectEvent(key types.NamespacedName, want string) {
	GinkgoHelper()
	Eventually(func() []string { return eventsFor(key) }).Should(ContainElement(ContainSubstring(want)))
}

// kubectl runs the real kubectl against the envtest API server.
func kubectl(args ...string) (string, error) {
	cmd := exec.Command("kubectl", append([]string{"--kubeconfig", kubeconfigPath}, args...)...)
	cmd.Dir = repoRoot
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// kubectlWithManifest runs kubectl args... -f FILE, FILE holding manifest.
func kubectlWithManifest(manifest string, args ...string) (string, error) {
	f := filepath.Join(GinkgoT().TempDir(), "manifest.yaml")
	Expect(os.WriteFile(f, []byte(manifest), 0o600)).To(Succeed())
	return kubectl(append(args, "-f", f)...)
}
