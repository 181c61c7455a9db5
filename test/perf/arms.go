package perf

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
	"github.com/getsentry/sandbox-controller/internal/vercel"
)

// Arm names.
const (
	ArmOperator = "operator"
	ArmDirect   = "direct"
	ArmFloor    = "floor"
	// ArmSharded is the operator split between two shards (two managers in
	// this process, each with its own shard of the arm's namespaces).
	ArmSharded = "sharded"
)

// shardedNamespaces is how many namespaces the sharded arm spreads its
// objects over, so that both shards have some.
const shardedNamespaces = 8

// armRun is what one arm measured in one round.
type armRun struct {
	latencies []time.Duration // per object: from the arm's start to Ready
	drain     time.Duration   // from the arm's start to the last Ready
	failed    int             // objects not Ready within ReadyTimeout

	sandboxWrites, eventWrites int64 // API-server writes by the manager
	vercelRequests             int64 // requests the emulator received
	writeTime                  time.Duration
	writeN                     int64
	cpu                        map[string]float64 // CPU seconds per process over the arm
	// creates is the emulator's count of createSandbox requests every 250 ms
	// from the arm's start: how busy the Vercel side was.
	creates []int64
	// inFlightToP50 is the mean number of Vercel requests in flight until
	// the median object was Ready.
	inFlightToP50 float64
	// shardViolations (sharded arm): objects whose Vercel sandbox was
	// called by two shards, or by a shard not its own; shardObjects: per
	// shard, the objects it called Vercel for.
	shardViolations int
	shardObjects    []int
}

// vercelSamples is how busy the Vercel side was during an arm.
type vercelSamples struct {
	// creates is the emulator's count of createSandbox requests every 250 ms
	// from the arm's start.
	creates []int64
	// inFlight is the number of requests the emulator was serving, sampled
	// every inFlightEvery from the arm's start.
	inFlight []int64
}

const inFlightEvery = 10 * time.Millisecond

// meanInFlight is the mean number of requests in flight from the arm's
// start until until: with until the arm's p50, how full the arm kept the
// Vercel pipe while the first half of its objects waited for Ready.
func (v vercelSamples) meanInFlight(until time.Duration) float64 {
	n := min(len(v.inFlight), int(until/inFlightEvery))
	if n == 0 {
		return 0
	}
	var sum int64
	for _, x := range v.inFlight[:n] {
		sum += x
	}
	return float64(sum) / float64(n)
}

// sampleVercel samples the emulator (see vercelSamples) until stop is closed.
func (h *harness) sampleVercel(stop <-chan struct{}) <-chan vercelSamples {
	out := make(chan vercelSamples, 1)
	base := h.emu.RequestCount("createSandbox")
	go func() {
		var s vercelSamples
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		f := time.NewTicker(inFlightEvery)
		defer f.Stop()
		for {
			select {
			case <-stop:
				// A last sample: the arm's total.
				s.creates = append(s.creates, h.emu.RequestCount("createSandbox")-base)
				out <- s
				return
			case <-f.C:
				s.inFlight = append(s.inFlight, h.rec.inFlight.Load())
			case <-t.C:
				s.creates = append(s.creates, h.emu.RequestCount("createSandbox")-base)
			}
		}
	}()
	return out
}

// sessionTimeoutSeconds keeps the benchmark's sessions up for the whole run
// (the emulator would otherwise stop them after the plan's 5 minutes).
const sessionTimeoutSeconds = 3 * 3600

// benchSandbox is the Sandbox every arm creates: the smallest useful spec.
// deletionPolicy Retain makes cleanup between rounds cheap (no Vercel
// deletes, which the plan throttles to 20/s); deletes are not measured.
func benchSandbox(ns, name, arm string) *sandboxv1.Sandbox {
	rt := sandboxv1.Runtime("node24")
	return &sandboxv1.Sandbox{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{armLabel: arm}},
		Spec: sandboxv1.SandboxSpec{
			Source:         sandboxv1.SandboxSource{Runtime: &rt},
			TimeoutSeconds: ptr.To[int64](sessionTimeoutSeconds),
			DeletionPolicy: sandboxv1.DeletionPolicyRetain,
		},
	}
}

func (h *harness) newNamespace(ctx context.Context, prefix string) (string, error) {
	ns := fmt.Sprintf("%s-%d", prefix, h.seq.Add(1))
	return ns, h.kube.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
}

// runCRArm creates n Sandboxes in a fresh namespace and waits, through a
// watch, until each is Ready. It serves the operator and the floor arms.
func (h *harness) runCRArm(ctx context.Context, arm string, n int, m *inProcess) (*armRun, error) {
	namespaces := make([]string, 1, shardedNamespaces)
	if arm == ArmSharded {
		namespaces = namespaces[:shardedNamespaces]
	}
	for i := range namespaces {
		ns, err := h.newNamespace(ctx, "bench-"+arm)
		if err != nil {
			return nil, err
		}
		namespaces[i] = ns
	}
	inArm := []client.ListOption{client.InNamespace(namespaces[0])}
	if arm == ArmSharded {
		// The previous run's objects are gone (deleteAll waits), so the
		// label selects this run's.
		inArm = []client.ListOption{client.MatchingLabels{armLabel: arm}}
		h.rec.startShards()
	}
	w, err := h.kube.Watch(ctx, &sandboxv1.SandboxList{}, inArm...)
	if err != nil {
		return nil, err
	}
	writes0 := m.writes.snapshot()
	wt0, wn0 := m.writes.writeLatency()
	emu0 := h.emu.RequestCount("")
	cpu0 := h.cpuSnapshot()

	if arm == ArmOperator && h.cfg.APIServerProfile != "" && !h.profiled && n == slices.Max(h.cfg.Sizes) {
		h.profiled = true
		go h.profileAPIServer(ctx, h.cfg.APIServerProfile, 10*time.Second)
	}
	stopSampling := make(chan struct{})
	samples := h.sampleVercel(stopSampling)
	start := time.Now()
	createErr := make(chan error, 1)
	go func() {
		createErr <- forEach(ctx, n, h.cfg.CreateConcurrency, func(ctx context.Context, i int) error {
			return h.kube.Create(ctx, benchSandbox(namespaces[i%len(namespaces)], fmt.Sprintf("sbx-%05d", i), arm))
		})
	}()
	newList := func() client.ObjectList { return &sandboxv1.SandboxList{} }
	ready, err := h.waitObjectsReady(ctx, w, newList, inArm, n, h.cfg.ReadyTimeout, start, sandboxReady)
	close(stopSampling)
	vs := <-samples
	if cerr := <-createErr; cerr != nil {
		return nil, fmt.Errorf("%s arm: create: %w", arm, cerr)
	}
	if err != nil {
		return nil, err
	}
	// Writes made for an object land before the watch shows its result, so
	// nothing more is expected; a short pause catches any that are not.
	time.Sleep(200 * time.Millisecond)
	r := &armRun{latencies: ready, failed: n - len(ready), creates: vs.creates, inFlightToP50: vs.meanInFlight(pct(ready, 50))}
	if len(ready) > 0 {
		r.drain = ready[len(ready)-1]
	}
	r.sandboxWrites, r.eventWrites = sandboxWrites(writes0, m.writes.snapshot())
	r.vercelRequests = h.emu.RequestCount("") - emu0
	r.cpu = cpuDelta(cpu0, h.cpuSnapshot())
	wt1, wn1 := m.writes.writeLatency()
	r.writeTime, r.writeN = wt1-wt0, wn1-wn0
	if arm == ArmSharded {
		r.shardObjects, r.shardViolations = h.rec.checkShards(2, namespaces)
	}
	for _, ns := range namespaces {
		if err := h.deleteAll(ctx, ns); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// waitReady collects, through a watch on ns, the time after start at which
// each Sandbox's Ready condition was first True, until n are or the timeout
// passes (see waitObjectsReady).
func (h *harness) waitReady(ctx context.Context, ns string, w watch.Interface, n int, timeout time.Duration, start time.Time) ([]time.Duration, error) {
	newList := func() client.ObjectList { return &sandboxv1.SandboxList{} }
	return h.waitObjectsReady(ctx, w, newList, []client.ListOption{client.InNamespace(ns)}, n, timeout, start, sandboxReady)
}

// readySandboxes creates n Sandboxes (build makes the i-th) in ns and waits
// until all are Ready, untimed: the set-up of a phase.
func (h *harness) readySandboxes(ctx context.Context, ns string, n int, build func(i int) *sandboxv1.Sandbox) error {
	w, err := h.kube.Watch(ctx, &sandboxv1.SandboxList{}, client.InNamespace(ns))
	if err != nil {
		return err
	}
	start := time.Now()
	if err := forEach(ctx, n, h.cfg.CreateConcurrency, func(ctx context.Context, i int) error {
		return h.kube.Create(ctx, build(i))
	}); err != nil {
		w.Stop()
		return err
	}
	ready, err := h.waitReady(ctx, ns, w, n, h.cfg.ReadyTimeout, start)
	if err != nil {
		return err
	}
	if len(ready) < n {
		return fmt.Errorf("only %d of %d Sandboxes in %s Ready within %s", len(ready), n, ns, h.cfg.ReadyTimeout)
	}
	return nil
}

// deleteAll removes a round's Sandboxes and waits until they are gone, so
// that the next arm starts on a quiet API server.
func (h *harness) deleteAll(ctx context.Context, ns string) error {
	left, err := h.countIn(ctx, &sandboxv1.Sandbox{}, ns)
	if err != nil {
		return err
	}
	// Two minutes, and one more per 2,000 objects: at 10,000 the manager
	// removes 10,000 finalizers, each after a Vercel call.
	wait := 2*time.Minute + time.Duration(left/2000)*time.Minute
	deadline := time.Now().Add(wait)
	var lastErr error
	for time.Now().Before(deadline) {
		// A collection delete of thousands of objects can outlast the API
		// server's request timeout (a timeout, or the stream reset) while it
		// goes on deleting; it is then sent again for whatever it had not
		// reached.
		if err := h.kube.DeleteAllOf(ctx, &sandboxv1.Sandbox{}, client.InNamespace(ns)); err != nil {
			if ctx.Err() != nil {
				return err
			}
			lastErr = err
			h.logf("  delete the Sandboxes of %s (%d left): %v; again", ns, left, err)
		}
		for range 40 {
			if left, err = h.countIn(ctx, &sandboxv1.Sandbox{}, ns); err != nil {
				return err
			}
			if left == 0 {
				return nil
			}
			time.Sleep(250 * time.Millisecond)
		}
	}
	return fmt.Errorf("%d sandboxes in %s not deleted within %s (last delete error: %v)", left, ns, wait, lastErr)
}

// runDirect is what a client would do without the operator: create n named
// Vercel sandboxes through the same Go client with the operator's
// concurrency, and poll (at the operator's cadence) any whose session is not
// running yet.
func (h *harness) runDirect(ctx context.Context, n int) (*armRun, error) {
	prefix := fmt.Sprintf("direct-%d", h.seq.Add(1))
	emu0 := h.emu.RequestCount("")
	cpu0 := h.cpuSnapshot()
	var mu sync.Mutex
	var ready []time.Duration
	stopSampling := make(chan struct{})
	samples := h.sampleVercel(stopSampling)
	start := time.Now()
	err := forEach(ctx, n, h.cfg.Concurrency, func(ctx context.Context, i int) error {
		name := fmt.Sprintf("%s-%05d", prefix, i)
		persistent := true
		resp, err := h.direct.CreateSandbox(ctx, vercel.CreateSandboxRequest{
			Name:       name,
			Runtime:    "node24",
			Timeout:    sessionTimeoutSeconds * 1000,
			Persistent: &persistent,
			Tags:       map[string]string{"managed-by": "bench-direct"},
		})
		for err == nil && (resp.Session == nil || resp.Session.Status != vercel.SessionRunning) {
			time.Sleep(time.Second)
			resp, err = h.direct.GetSandbox(ctx, name, false)
		}
		if err != nil {
			return fmt.Errorf("direct arm: %w", err)
		}
		mu.Lock()
		ready = append(ready, time.Since(start))
		mu.Unlock()
		return nil
	})
	close(stopSampling)
	vs := <-samples
	if err != nil {
		return nil, err
	}
	sort.Slice(ready, func(i, j int) bool { return ready[i] < ready[j] })
	r := &armRun{latencies: ready, drain: ready[len(ready)-1], vercelRequests: h.emu.RequestCount("") - emu0, cpu: cpuDelta(cpu0, h.cpuSnapshot()),
		creates: vs.creates, inFlightToP50: vs.meanInFlight(pct(ready, 50))}
	return r, nil
}

// forEach runs f for 0..n-1 with at most par calls in flight and returns the
// first error.
func forEach(ctx context.Context, n, par int, f func(context.Context, int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	next := make(chan int)
	errs := make(chan error, par)
	var wg sync.WaitGroup
	for w := 0; w < min(par, n); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := f(ctx, i); err != nil {
					errs <- err
					cancel()
					return
				}
			}
		}()
	}
	go func() {
		defer close(next)
		for i := 0; i < n; i++ {
			select {
			case next <- i:
			case <-ctx.Done():
				return
			}
		}
	}()
	wg.Wait()
	close(errs)
	return <-errs
}

// floorReconciler is the floor arm's controller: one status write per
// Sandbox, no Vercel call — what any controller pays the API server to turn
// a created object Ready. On delete it removes the finalizer the admission
// policy added, as the operator would.
type floorReconciler struct{ client.Client }

func (r *floorReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	s := &sandboxv1.Sandbox{}
	if err := r.Get(ctx, req.NamespacedName, s); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !s.DeletionTimestamp.IsZero() {
		if controllerutil.RemoveFinalizer(s, sandboxv1.SandboxFinalizer) {
			return ctrl.Result{}, r.Update(ctx, s)
		}
		return ctrl.Result{}, nil
	}
	if meta.IsStatusConditionTrue(s.Status.Conditions, sandboxv1.ConditionReady) {
		return ctrl.Result{}, nil
	}
	before := s.DeepCopy()
	s.Status.Phase = sandboxv1.SandboxRunning
	s.Status.ObservedGeneration = s.Generation
	meta.SetStatusCondition(&s.Status.Conditions, metav1.Condition{
		Type: sandboxv1.ConditionReady, Status: metav1.ConditionTrue, Reason: sandboxv1.ReasonRunning,
		Message: "Marked Ready by the benchmark's floor controller", ObservedGeneration: s.Generation,
	})
	return ctrl.Result{}, r.Status().Patch(ctx, s, client.MergeFrom(before))
}

// startFloor runs the floor controller in a manager of its own that sees only
// floor objects, with the operator's concurrency.
func (h *harness) startFloor(ctx context.Context) (*inProcess, error) {
	w := newWriteCounter()
	floorOnly := labels.SelectorFromSet(labels.Set{armLabel: armFloor})
	mgr, err := ctrl.NewManager(h.managerConfig(w), ctrl.Options{
		Scheme:                 h.scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache:                  cache.Options{ByObject: map[client.Object]cache.ByObject{&sandboxv1.Sandbox{}: {Label: floorOnly}}},
		Controller:             config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		return nil, err
	}
	err = ctrl.NewControllerManagedBy(mgr).
		For(&sandboxv1.Sandbox{}).
		WithOptions(controller.Options{MaxConcurrentReconciles: h.cfg.Concurrency}).
		Named("bench-floor").
		Complete(&floorReconciler{Client: mgr.GetClient()})
	if err != nil {
		return nil, err
	}
	return runManager(ctx, mgr, w)
}
