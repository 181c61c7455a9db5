package controllers

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
	"github.com/getsentry/sandbox-controller/internal/vercel"
	"github.com/getsentry/sandbox-controller/localstack/emulator"
)

// The simulations run the real reconciler against the emulator on a fake
// clock for a simulated hour, with the Kubernetes side in a fake client. A
// small event loop stands in for the workqueue: one pending timer per object,
// the earliest wins (as the delaying queue keeps it), and a heartbeat
// reconciles at once, as the annotation watch does. Every Vercel request the
// controller makes is counted through the client's OnRequest hook.

// TestSimulatedHourIdleCostsNothing: 20 Sandboxes whose clients never
// heartbeat go Idle after their 5-minute window, and from then on cost no
// Vercel request for the rest of the hour.
func TestSimulatedHourIdleCostsNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("simulates an hour")
	}
	sim := newSimulation(t, 20, 5*time.Minute, 24*time.Hour)
	sim.run(6*time.Minute, 0)
	for _, sbx := range sim.sandboxes() {
		if sbx.Status.Phase != sandboxv1.SandboxIdle || !hasCondition(sbx.Status.Conditions, sandboxv1.ConditionReady, sandboxv1.ReasonIdleTimeout) {
			t.Fatalf("%s: phase %s, conditions %v; want Idle (IdleTimeout) after the window", sbx.Name, sbx.Status.Phase, sbx.Status.Conditions)
		}
		if sbx.Status.ExpiresAt != nil || sbx.Status.StoppedAt == nil {
			t.Errorf("%s: expiresAt %v, stoppedAt %v; want no deadline and a stop time", sbx.Name, sbx.Status.ExpiresAt, sbx.Status.StoppedAt)
		}
	}
	firstWindow := sim.requests["total"]
	if limit := sim.n * (6 + 2); sim.requests["getSandbox"] > limit {
		t.Errorf("polls in the first 6 minutes = %d, want at most %d", sim.requests["getSandbox"], limit)
	}
	sim.run(54*time.Minute, 0)
	t.Logf("simulated 1h: %d sandboxes without heartbeats: %d Vercel requests in the first 6 minutes (%v), %d in the 54 Idle minutes after",
		sim.n, firstWindow, sim.requests, sim.requests["total"]-firstWindow)
	if d := sim.requests["total"] - firstWindow; d != 0 {
		t.Errorf("Idle sandboxes made %d Vercel requests; want 0", d)
	}
	if n := sim.events.get("Normal " + sandboxv1.ReasonIdleTimeout); n != sim.n {
		t.Errorf("IdleTimeout events = %d, want %d", n, sim.n)
	}
}

// TestSimulatedPlanBelowFlag: when --max-session-length is above what the
// Vercel plan allows, the one refused extension per session is remembered (no
// retry on every heartbeat), warned about once, and the session's end is
// reported as MaxSessionLength.
func TestSimulatedPlanBelowFlag(t *testing.T) {
	sim := newSimulation(t, 5, 5*time.Minute, 45*time.Minute)
	sim.r.MaxSessionLength = 24 * time.Hour // the flag; the plan says 45m
	sim.run(46*time.Minute, 30*time.Second)
	if n := sim.requests["extendTimeout 400"]; n != sim.n {
		t.Errorf("refused extensions = %d, want one per sandbox (%d); requests %v", n, sim.n, sim.requests)
	}
	if n := sim.events.get("Warning " + sandboxv1.ReasonMaxSessionLength); n != sim.n {
		t.Errorf("warnings = %d, want one per sandbox", n)
	}
	if n := sim.events.get("Normal " + sandboxv1.ReasonMaxSessionLength); n != sim.n {
		t.Errorf("MaxSessionLength reports = %d, want %d; events %v", n, sim.n, sim.events.counts)
	}
	if n := sim.events.get("Normal Resumed"); n != sim.n {
		t.Errorf("resumes = %d, want %d: a heartbeat wakes each after the stop", n, sim.n)
	}
}

// TestSimulatedShutdown: the ShutdownWarning event comes --shutdown-warning
// before spec.shutdownTime and not earlier; at that time policy Stop stops the
// session for good and policy Delete deletes the Vercel sandbox and the object.
func TestSimulatedShutdown(t *testing.T) {
	sim := newSimulation(t, 2, 5*time.Minute, 24*time.Hour)
	sim.r.ShutdownWarning = 10 * time.Minute
	ctx := context.Background()
	shutdown := metav1.NewTime(sim.start.Add(40 * time.Minute))
	for i, policy := range []sandboxv1.ShutdownPolicy{sandboxv1.ShutdownStop, sandboxv1.ShutdownDelete} {
		sbx := &sandboxv1.Sandbox{}
		if err := sim.kube.Get(ctx, sim.keys[i], sbx); err != nil {
			t.Fatal(err)
		}
		sbx.Spec.ShutdownTime, sbx.Spec.ShutdownPolicy = &shutdown, policy
		if err := sim.kube.Update(ctx, sbx); err != nil {
			t.Fatal(err)
		}
	}
	// Heartbeats keep both running until the end.
	sim.run(29*time.Minute, 30*time.Second)
	names := []string{}
	for _, sbx := range sim.sandboxes() {
		if sbx.Status.Phase != sandboxv1.SandboxRunning {
			t.Fatalf("%s: phase %s before the shutdown; want Running", sbx.Name, sbx.Status.Phase)
		}
		names = append(names, sbx.Status.VercelName)
	}
	if n := sim.events.get("Warning ShutdownWarning"); n != 0 {
		t.Fatalf("%d warnings 11 minutes before the shutdown; want none yet", n)
	}
	sim.run(2*time.Minute, 30*time.Second)
	if n := sim.events.get("Warning ShutdownWarning"); n != 2 {
		t.Fatalf("%d warnings 9 minutes before the shutdown; want one per Sandbox", n)
	}
	sim.run(10*time.Minute, 30*time.Second)
	if n := sim.events.get("Warning ShutdownWarning"); n != 2 {
		t.Errorf("%d warnings in all; want exactly one per Sandbox", n)
	}
	stopped := &sandboxv1.Sandbox{}
	if err := sim.kube.Get(ctx, sim.keys[0], stopped); err != nil {
		t.Fatal(err)
	}
	if stopped.Status.Phase != sandboxv1.SandboxStopped || !hasCondition(stopped.Status.Conditions, sandboxv1.ConditionReady, sandboxv1.ReasonShutdownTime) {
		t.Errorf("policy Stop: phase %s, conditions %v; want Stopped (ShutdownTime)", stopped.Status.Phase, stopped.Status.Conditions)
	}
	if remote, ok := sim.emu.Sandbox(stopped.Status.VercelName); !ok || remote.Status != vercel.SessionStopped {
		t.Errorf("policy Stop: Vercel sandbox %+v; want it kept, stopped", remote)
	}
	if got := sim.sessions()[stopped.Status.VercelName]; got != 1 {
		t.Errorf("policy Stop: %d sessions; heartbeats after the shutdown must not resume it", got)
	}
	if err := sim.kube.Get(ctx, sim.keys[1], &sandboxv1.Sandbox{}); !apierrors.IsNotFound(err) {
		t.Errorf("policy Delete: get the object: %v; want it deleted", err)
	}
	if _, ok := sim.emu.Sandbox(names[1]); ok {
		t.Errorf("policy Delete: the Vercel sandbox still exists")
	}
	if sim.events.get("Normal ShutdownStop") != 1 || sim.events.get("Normal ShutdownDelete") != 1 {
		t.Errorf("events %v; want one ShutdownStop and one ShutdownDelete", sim.events.counts)
	}
}

type simulation struct {
	t          *testing.T
	n          int
	idle, poll time.Duration
	start      time.Time
	clk        *emulator.FakeClock
	emu        *emulator.Emulator
	kube       client.Client
	r          *SandboxReconciler
	events     *countingRecorder
	keys       []types.NamespacedName
	timers     map[types.NamespacedName]time.Time
	nextBeat   map[types.NamespacedName]time.Time
	heartbeats int

	mu       sync.Mutex
	requests map[string]int // by endpoint, by "endpoint status", and "total"
}

func newSimulation(t *testing.T, n int, idle, maxSession time.Duration) *simulation {
	start := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	sim := &simulation{
		t: t, n: n, idle: idle, poll: time.Minute, start: start, clk: emulator.NewFakeClock(start),
		events: &countingRecorder{counts: map[string]int{}}, requests: map[string]int{},
		timers: map[types.NamespacedName]time.Time{}, nextBeat: map[types.NamespacedName]time.Time{},
	}
	plan := emulator.PlanPro()
	plan.MaxSessionDuration = maxSession
	emu, err := emulator.New(emulator.Options{Clock: sim.clk, Exec: "none", Plan: plan})
	if err != nil {
		t.Fatal(err)
	}
	url, err := emu.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = emu.Close() })
	sim.emu = emu
	vc, err := vercel.New(vercel.Config{
		BaseURL: url, Token: emu.Token(), TeamID: "team_emulator", ProjectID: "prj_emulator",
		RequestsPerMinute: -1,
		OnRequest: func(endpoint string, status int, _ time.Duration) {
			sim.mu.Lock()
			defer sim.mu.Unlock()
			sim.requests[fmt.Sprintf("%s %d", endpoint, status)]++
			sim.requests[endpoint]++
			sim.requests["total"]++
		},
	})
	if err != nil {
		t.Fatal(err)
	}

	scheme := runtime.NewScheme()
	if err := sandboxv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	objs := make([]client.Object, n)
	for i := range n {
		key := types.NamespacedName{Namespace: "sim", Name: fmt.Sprintf("box-%03d", i)}
		sim.keys = append(sim.keys, key)
		rt := sandboxv1.Runtime("node24")
		objs[i] = &sandboxv1.Sandbox{
			ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name, UID: types.UID(fmt.Sprintf("%08d-0000-0000-0000-000000000000", i)), Generation: 1},
			// The CRD's defaults, which the fake client does not apply.
			Spec: sandboxv1.SandboxSpec{
				Source: sandboxv1.SandboxSource{Runtime: &rt}, TimeoutSeconds: ptr.To(int64(idle / time.Second)), Persistent: ptr.To(true),
				State: sandboxv1.SandboxStateRunning, ShutdownPolicy: sandboxv1.ShutdownStop, DeletionPolicy: sandboxv1.DeletionPolicyDelete,
			},
		}
	}
	// A plain object tracker: the default one rebuilds a REST mapper on every
	// write, which would dominate an hour of 100 sandboxes.
	sim.kube = fake.NewClientBuilder().WithScheme(scheme).WithStatusSubresource(&sandboxv1.Sandbox{}).WithObjects(objs...).
		WithObjectTracker(clienttesting.NewObjectTracker(scheme, serializer.NewCodecFactory(scheme).UniversalDecoder())).Build()
	sim.r = &SandboxReconciler{
		Client: sim.kube, APIReader: sim.kube, Vercel: vc, Recorder: sim.events,
		PollInterval: sim.poll, MaxSessionLength: maxSession, Now: sim.clk.Now,
	}
	for i, k := range sim.keys {
		// Clients heartbeat on their own schedules, spread over the period.
		sim.nextBeat[k] = start.Add(time.Duration(i) * 30 * time.Second / time.Duration(n))
		sim.timers[k] = start // the object's creation
	}
	return sim
}

// run advances the simulation by d; clients heartbeat every beat (0 = never).
func (sim *simulation) run(d, beat time.Duration) {
	ctx := ctrl.LoggerInto(context.Background(), ctrl.Log)
	end := sim.clk.Now().Add(d)
	for {
		next := end
		for _, k := range sim.keys {
			if at, ok := sim.timers[k]; ok && at.Before(next) {
				next = at
			}
			if beat > 0 && sim.nextBeat[k].Before(next) {
				next = sim.nextBeat[k]
			}
		}
		if next.After(sim.clk.Now()) {
			sim.clk.Set(next)
		}
		if !next.Before(end) {
			return
		}
		for _, k := range sim.keys {
			if beat > 0 && !sim.nextBeat[k].After(next) {
				obj := &sandboxv1.Sandbox{}
				err := sim.kube.Get(ctx, k, obj)
				if err == nil {
					metav1.SetMetaDataAnnotation(&obj.ObjectMeta, sandboxv1.AnnotationLastActivity, next.Format(time.RFC3339Nano))
					err = sim.kube.Update(ctx, obj)
				}
				if apierrors.IsNotFound(err) {
					sim.nextBeat[k] = end // deleted: its client is gone
					continue
				} else if err != nil {
					sim.t.Fatal(err)
				}
				sim.heartbeats++
				sim.nextBeat[k] = next.Add(beat)
				sim.reconcile(ctx, k)
			}
			if at, ok := sim.timers[k]; ok && !at.After(next) {
				delete(sim.timers, k)
				sim.reconcile(ctx, k)
			}
		}
	}
}

func (sim *simulation) reconcile(ctx context.Context, key types.NamespacedName) {
	res, err := sim.r.Reconcile(ctx, ctrl.Request{NamespacedName: key})
	d := res.RequeueAfter
	if err != nil {
		sim.t.Errorf("%s at +%s: %v", key.Name, sim.clk.Now().Sub(sim.start), err)
		d = time.Second
	}
	if d > 0 {
		if at, ok := sim.timers[key]; !ok || sim.clk.Now().Add(d).Before(at) {
			sim.timers[key] = sim.clk.Now().Add(d)
		}
	}
}

func (sim *simulation) sandboxes() []sandboxv1.Sandbox {
	out := make([]sandboxv1.Sandbox, 0, len(sim.keys))
	for _, k := range sim.keys {
		sbx := sandboxv1.Sandbox{}
		if err := sim.kube.Get(context.Background(), k, &sbx); err != nil {
			sim.t.Fatal(err)
		}
		out = append(out, sbx)
	}
	return out
}

// sessions counts the sessions of each Vercel sandbox.
func (sim *simulation) sessions() map[string]int {
	out := map[string]int{}
	for _, s := range sim.emu.Sessions() {
		out[s.SourceSandboxName]++
	}
	return out
}

// countingRecorder counts events by "Type Reason".
type countingRecorder struct {
	mu     sync.Mutex
	counts map[string]int
}

func (c *countingRecorder) Eventf(_ runtime.Object, _ runtime.Object, eventtype, reason, _, _ string, _ ...interface{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.counts[eventtype+" "+reason]++
}

func (c *countingRecorder) get(k string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.counts[k]
}
