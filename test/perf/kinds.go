package perf

import (
	"context"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
	"github.com/getsentry/sandbox-controller/internal/vercel"
)

// The kinds phase measures the two other kinds under load with the
// in-process manager, after the grid and before the idle phase:
//
//   - snapshots: Config.Snapshots Sandboxes are made Ready (untimed), then as
//     many SandboxSnapshots, each capturing one of them (spec.source.
//     sandboxRef), are created in one burst; each is timed until it is Ready
//     with its Vercel snapshot recorded (status.readyToUse, status.snapshotID).
//   - fork: one Sandbox and one SandboxSnapshot of it are made Ready
//     (untimed), then one SandboxFork of Config.ForkReplicas children from
//     that snapshot (spec.source.snapshotRef) is created; each child is timed
//     until it is Ready, and the fork until its own Ready condition says all
//     are.
//
// Then everything the step created is deleted at once, as a namespace
// deletion would, and the emulator is asked whether any Vercel sandbox or
// snapshot created since the step began is still there.

// Kind rows of the phase.
const (
	KindSnapshot = "SandboxSnapshot"
	KindFork     = "SandboxFork"
)

// Labels of the phase's objects (the operator's manager sees them: only the
// floor arm's are hidden from it).
const (
	armSnapshots = "kinds-snapshot"
	armFork      = "kinds-fork"
)

// KindsResult is what the kinds phase measured.
type KindsResult struct {
	// LatencyMs is the emulated Vercel latency the phase ran at: the
	// largest of the grid's.
	LatencyMs float64     `json:"latencyMs"`
	Snapshot  *KindResult `json:"snapshot,omitempty"`
	Fork      *KindResult `json:"fork,omitempty"`
}

// KindResult is one kind's step.
type KindResult struct {
	Kind string `json:"kind"`
	// Objects is how many were timed: SandboxSnapshots, or the fork's children.
	Objects int `json:"objects"`
	Failed  int `json:"failed"` // not Ready within ReadyTimeout
	// NotReady describes (up to 10 of) the failed ones: name, phase, Ready
	// reason and message.
	NotReady []string `json:"notReady,omitempty"`
	// Time to Ready from the burst's start, over all objects; drain is the
	// last one.
	P50Ms   float64 `json:"p50Ms"`
	P95Ms   float64 `json:"p95Ms"`
	P99Ms   float64 `json:"p99Ms"`
	DrainMs float64 `json:"drainMs"`
	// ForkReadyMs is when the SandboxFork's own Ready condition turned True
	// (fork only; 0 when it did not).
	ForkReadyMs float64 `json:"forkReadyMs,omitempty"`
	// Verified counts the objects whose Vercel artifact the emulator holds:
	// a created snapshot with the id in status (snapshots), a running
	// session under the Vercel name in status (fork children).
	Verified int `json:"verified"`

	// The in-process manager's API-server writes from the burst to the last
	// Ready, per object: WritesPerObject sums every write to the operator's
	// kinds (sandboxes, sandboxsnapshots, sandboxforks, with their status),
	// whichever object they hit: a capture also writes the captured Sandbox,
	// and the fork's own writes are spread over its children. Events apart.
	WritesPerObject      float64            `json:"writesPerObject"`
	EventWritesPerObject float64            `json:"eventWritesPerObject"`
	WritesByRequest      map[string]float64 `json:"writesPerObjectByRequest"` // "PATCH sandboxsnapshots/status": per object
	// Requests the emulator received over the same window, per object.
	VercelRequestsPerObject  float64            `json:"vercelRequestsPerObject"`
	VercelRequestsByEndpoint map[string]float64 `json:"vercelRequestsPerObjectByEndpoint"`
	// CPU time per object by process over the same window (as in the arms).
	CPUMsPerObject map[string]float64 `json:"cpuMsPerObject"`
	// SetupMs is the untimed preparation: the source Sandboxes (and the
	// fork's SandboxSnapshot) until Ready.
	SetupMs float64 `json:"setupMs"`

	// Teardown: every object of the step deleted at once (TeardownObjects,
	// the fork's children included) until all are gone. Writes and Vercel
	// requests are per deleted object; Vercel's 20 deletes per second (the
	// emulator's Pro plan) bound its duration.
	TeardownObjects          int              `json:"teardownObjects"`
	TeardownMs               float64          `json:"teardownMs"`
	TeardownWritesPerObject  float64          `json:"teardownWritesPerObject"`
	TeardownVercelPerObject  float64          `json:"teardownVercelRequestsPerObject"`
	TeardownVercelByEndpoint map[string]int64 `json:"teardownVercelRequestsByEndpoint"` // totals
	// TeardownIncomplete lists the kinds with objects still there after
	// ReadyTimeout.
	TeardownIncomplete []string `json:"teardownIncomplete,omitempty"`
	// Vercel sandboxes (names) and snapshots (ids) that appeared since the
	// step began and are still there after the teardown.
	LeakedSandboxes []string `json:"leakedSandboxes"`
	LeakedSnapshots []string `json:"leakedSnapshots"`
}

// runKinds runs the steps Config.Snapshots and Config.ForkReplicas ask for,
// at the largest latency of the grid.
func (h *harness) runKinds(ctx context.Context) (*KindsResult, error) {
	lat := slices.Max(h.cfg.Latencies)
	h.emu.Faults().SetLatency("*", lat)
	defer h.emu.Faults().SetLatency("*", 0)
	res := &KindsResult{LatencyMs: ms(lat)}
	if n := h.cfg.Snapshots; n > 0 {
		time.Sleep(1500 * time.Millisecond) // as between arms: refill the budget, settle
		h.logf("kinds: %d SandboxSnapshots capturing %d Sandboxes (latency %s)", n, n, lat)
		r, err := h.runSnapshotStep(ctx, n)
		res.Snapshot = r
		if err != nil {
			return res, fmt.Errorf("snapshot step: %w", err)
		}
		h.logKind(r)
	}
	if k := h.cfg.ForkReplicas; k > 0 {
		time.Sleep(1500 * time.Millisecond)
		h.logf("kinds: one SandboxFork of %d from one SandboxSnapshot (latency %s)", k, lat)
		r, err := h.runForkStep(ctx, k)
		res.Fork = r
		if err != nil {
			return res, fmt.Errorf("fork step: %w", err)
		}
		h.logKind(r)
	}
	return res, nil
}

func (h *harness) logKind(r *KindResult) {
	h.logf("  %s: %d Ready of %d, p50 %.3fs drain %.3fs, %.2f writes/obj, %.2f Vercel req/obj; teardown %.1fs, left in Vercel: %d sandboxes, %d snapshots",
		r.Kind, r.Objects-r.Failed, r.Objects, r.P50Ms/1000, r.DrainMs/1000, r.WritesPerObject, r.VercelRequestsPerObject,
		r.TeardownMs/1000, len(r.LeakedSandboxes), len(r.LeakedSnapshots))
}

// kindsSandbox is a source Sandbox of the phase: benchSandbox, but with the
// default deletionPolicy Delete, since the phase checks that deleting
// everything leaves nothing in Vercel.
func kindsSandbox(ns, name, arm string) *sandboxv1.Sandbox {
	s := benchSandbox(ns, name, arm)
	s.Spec.DeletionPolicy = sandboxv1.DeletionPolicyDelete
	return s
}

func captureSnapshot(ns, name, source, arm string) *sandboxv1.SandboxSnapshot {
	return &sandboxv1.SandboxSnapshot{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{armLabel: arm}},
		Spec: sandboxv1.SandboxSnapshotSpec{
			Source:         sandboxv1.SandboxSnapshotSource{SandboxRef: &sandboxv1.LocalObjectReference{Name: source}},
			DeletionPolicy: sandboxv1.DeletionPolicyDelete,
		},
	}
}

func snapshotReady(o client.Object) bool {
	s, ok := o.(*sandboxv1.SandboxSnapshot)
	return ok && s.Status.ReadyToUse && s.Status.SnapshotID != "" &&
		meta.IsStatusConditionTrue(s.Status.Conditions, sandboxv1.ConditionReady)
}

func sandboxReady(o client.Object) bool {
	s, ok := o.(*sandboxv1.Sandbox)
	return ok && meta.IsStatusConditionTrue(s.Status.Conditions, sandboxv1.ConditionReady)
}

// window is the counters at the start of a timed step.
type window struct {
	writes map[string]int64
	emu    map[string]int64
	cpu    map[string]float64
}

func (h *harness) openWindow() window {
	return window{writes: h.operator.writes.snapshot(), emu: h.emu.Counts(), cpu: h.cpuSnapshot()}
}

// close fills r's per-object write, request and CPU figures.
func (h *harness) closeWindow(w window, r *KindResult, n int) {
	// Writes for an object land before the watch shows its result; a short
	// pause catches any that do not (as in the arms).
	time.Sleep(200 * time.Millisecond)
	kinds, events, by := kindWrites(w.writes, h.operator.writes.snapshot())
	r.WritesPerObject = float64(kinds) / float64(n)
	r.EventWritesPerObject = float64(events) / float64(n)
	r.WritesByRequest = perObject(by, n)
	emu := countsDelta(w.emu, h.emu.Counts())
	r.VercelRequestsPerObject = float64(emu["total"]) / float64(n)
	delete(emu, "total")
	r.VercelRequestsByEndpoint = perObject(emu, n)
	r.CPUMsPerObject = map[string]float64{}
	for k, v := range cpuDelta(w.cpu, h.cpuSnapshot()) {
		r.CPUMsPerObject[k] = v * 1000 / float64(n)
	}
}

// runSnapshotStep: n Ready Sandboxes (untimed), n captures (timed),
// teardown and leak check.
func (h *harness) runSnapshotStep(ctx context.Context, n int) (*KindResult, error) {
	r := &KindResult{Kind: KindSnapshot, Objects: n}
	ns, err := h.newNamespace(ctx, "bench-snap")
	if err != nil {
		return r, err
	}
	inv0 := h.vercelInventory()
	setup := time.Now()
	if err := h.readySandboxes(ctx, ns, n, func(i int) *sandboxv1.Sandbox {
		return kindsSandbox(ns, fmt.Sprintf("src-%05d", i), armSnapshots)
	}); err != nil {
		return r, err
	}
	r.SetupMs = ms(time.Since(setup))
	time.Sleep(1500 * time.Millisecond)

	w, err := h.kube.Watch(ctx, &sandboxv1.SandboxSnapshotList{}, client.InNamespace(ns))
	if err != nil {
		return r, err
	}
	win := h.openWindow()
	start := time.Now()
	createErr := make(chan error, 1)
	go func() {
		createErr <- forEach(ctx, n, h.cfg.CreateConcurrency, func(ctx context.Context, i int) error {
			return h.kube.Create(ctx, captureSnapshot(ns, fmt.Sprintf("snap-%05d", i), fmt.Sprintf("src-%05d", i), armSnapshots))
		})
	}()
	ready, err := h.waitObjectsReady(ctx, w, func() client.ObjectList { return &sandboxv1.SandboxSnapshotList{} },
		[]client.ListOption{client.InNamespace(ns)}, n, h.cfg.ReadyTimeout, start, snapshotReady)
	if cerr := <-createErr; cerr != nil {
		return r, fmt.Errorf("create: %w", cerr)
	}
	if err != nil {
		return r, err
	}
	h.fillLatencies(r, ready)
	h.closeWindow(win, r, n)

	// Each Ready snapshot's id is a created snapshot in the emulator.
	list := &sandboxv1.SandboxSnapshotList{}
	if err := h.kube.List(ctx, list, client.InNamespace(ns)); err != nil {
		return r, err
	}
	live := map[string]bool{}
	for _, s := range h.emu.Snapshots() {
		live[s.ID] = s.Status == vercel.SnapshotCreated
	}
	for i := range list.Items {
		s := &list.Items[i]
		if snapshotReady(s) && live[s.Status.SnapshotID] {
			r.Verified++
		} else if !snapshotReady(s) && len(r.NotReady) < 10 {
			r.NotReady = append(r.NotReady, describe(s.Name, string(s.Status.Phase), s.Status.Conditions))
		}
	}
	return r, h.teardown(ctx, r, ns, inv0, &sandboxv1.SandboxSnapshot{}, &sandboxv1.Sandbox{})
}

// runForkStep: one Ready Sandbox and a snapshot of it (untimed), then one
// fork of k children (timed), teardown and leak check.
func (h *harness) runForkStep(ctx context.Context, k int) (*KindResult, error) {
	r := &KindResult{Kind: KindFork, Objects: k}
	ns, err := h.newNamespace(ctx, "bench-fork")
	if err != nil {
		return r, err
	}
	inv0 := h.vercelInventory()
	setup := time.Now()
	if err := h.readySandboxes(ctx, ns, 1, func(i int) *sandboxv1.Sandbox {
		return kindsSandbox(ns, fmt.Sprintf("src-%05d", i), armFork)
	}); err != nil {
		return r, err
	}
	sw, err := h.kube.Watch(ctx, &sandboxv1.SandboxSnapshotList{}, client.InNamespace(ns))
	if err != nil {
		return r, err
	}
	base := captureSnapshot(ns, "base", "src-00000", armFork)
	if err := h.kube.Create(ctx, base); err != nil {
		sw.Stop()
		return r, err
	}
	got, err := h.waitObjectsReady(ctx, sw, func() client.ObjectList { return &sandboxv1.SandboxSnapshotList{} },
		[]client.ListOption{client.InNamespace(ns)}, 1, h.cfg.ReadyTimeout, time.Now(), snapshotReady)
	if err != nil {
		return r, err
	}
	if len(got) != 1 {
		return r, fmt.Errorf("the fork's source SandboxSnapshot was not Ready within %s", h.cfg.ReadyTimeout)
	}
	r.SetupMs = ms(time.Since(setup))
	time.Sleep(1500 * time.Millisecond)

	const forkName = "fork"
	children := []client.ListOption{client.InNamespace(ns), client.MatchingLabels{sandboxv1.LabelFork: forkName}}
	cw, err := h.kube.Watch(ctx, &sandboxv1.SandboxList{}, children...)
	if err != nil {
		return r, err
	}
	forkOpts := []client.ListOption{client.InNamespace(ns)}
	fw, err := h.kube.Watch(ctx, &sandboxv1.SandboxForkList{}, forkOpts...)
	if err != nil {
		cw.Stop()
		return r, err
	}
	fork := &sandboxv1.SandboxFork{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: forkName, Labels: map[string]string{armLabel: armFork}},
		Spec: sandboxv1.SandboxForkSpec{
			Source:   sandboxv1.SandboxForkSource{SnapshotRef: &sandboxv1.LocalObjectReference{Name: base.Name}},
			Replicas: ptr.To(int32(k)),
			Template: sandboxv1.SandboxForkTemplate{Spec: sandboxv1.SandboxOverrides{TimeoutSeconds: ptr.To[int64](sessionTimeoutSeconds)}},
		},
	}
	win := h.openWindow()
	start := time.Now()
	if err := h.kube.Create(ctx, fork); err != nil {
		cw.Stop()
		fw.Stop()
		return r, err
	}
	forkReady := make(chan []time.Duration, 1)
	go func() {
		d, _ := h.waitObjectsReady(ctx, fw, func() client.ObjectList { return &sandboxv1.SandboxForkList{} }, forkOpts, 1, h.cfg.ReadyTimeout, start,
			func(o client.Object) bool {
				f, ok := o.(*sandboxv1.SandboxFork)
				return ok && f.Status.ReadyReplicas == int32(k) && meta.IsStatusConditionTrue(f.Status.Conditions, sandboxv1.ConditionReady)
			})
		forkReady <- d
	}()
	ready, err := h.waitObjectsReady(ctx, cw, func() client.ObjectList { return &sandboxv1.SandboxList{} }, children, k, h.cfg.ReadyTimeout, start, sandboxReady)
	if err != nil {
		return r, err
	}
	if fr := <-forkReady; len(fr) == 1 {
		r.ForkReadyMs = ms(fr[0])
	}
	h.fillLatencies(r, ready)
	h.closeWindow(win, r, k)

	list := &sandboxv1.SandboxList{}
	if err := h.kube.List(ctx, list, children...); err != nil {
		return r, err
	}
	for i := range list.Items {
		c := &list.Items[i]
		if !sandboxReady(c) {
			if len(r.NotReady) < 10 {
				r.NotReady = append(r.NotReady, describe(c.Name, string(c.Status.Phase), c.Status.Conditions))
			}
			continue
		}
		if sb, ok := h.emu.Sandbox(c.Status.VercelName); ok && sb.Status == vercel.SessionRunning {
			r.Verified++
		}
	}
	if r.ForkReadyMs == 0 {
		f := &sandboxv1.SandboxFork{}
		if err := h.kube.Get(ctx, client.ObjectKeyFromObject(fork), f); err == nil && len(r.NotReady) < 10 {
			r.NotReady = append(r.NotReady, describe("SandboxFork "+f.Name, string(f.Status.Phase), f.Status.Conditions))
		}
	}
	// The fork deletes its children; the snapshot and the source go at the
	// same time, as in a namespace deletion.
	return r, h.teardown(ctx, r, ns, inv0, &sandboxv1.SandboxFork{}, &sandboxv1.SandboxSnapshot{}, &sandboxv1.Sandbox{})
}

func (h *harness) fillLatencies(r *KindResult, ready []time.Duration) {
	r.Failed = r.Objects - len(ready)
	r.P50Ms, r.P95Ms, r.P99Ms = ms(pct(ready, 50)), ms(pct(ready, 95)), ms(pct(ready, 99))
	if len(ready) > 0 {
		r.DrainMs = ms(ready[len(ready)-1])
	}
}

// teardown deletes every object of the given kinds in ns at once, waits
// until they are all gone (their finalizers ran), and reports any Vercel
// sandbox or snapshot created since inv0 that is still there.
func (h *harness) teardown(ctx context.Context, r *KindResult, ns string, inv0 vercelInventory, kinds ...client.Object) error {
	emu0 := h.emu.Counts()
	writes0 := h.operator.writes.snapshot()
	start := time.Now()
	for _, obj := range kinds {
		l, err := h.countIn(ctx, obj, ns)
		if err != nil {
			return err
		}
		r.TeardownObjects += l
	}
	for _, obj := range kinds {
		if err := h.kube.DeleteAllOf(ctx, obj, client.InNamespace(ns)); err != nil {
			return err
		}
	}
	// A fork's children are deleted by the fork, not by a DeleteAllOf:
	// Sandboxes are always listed until none is left.
	deadline := start.Add(h.cfg.ReadyTimeout)
	for {
		var left []string
		for _, obj := range append(slices.Clone(kinds), &sandboxv1.Sandbox{}) {
			c, err := h.countIn(ctx, obj, ns)
			if err != nil {
				return err
			}
			if c > 0 {
				left = append(left, fmt.Sprintf("%d %T", c, obj))
			}
		}
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			r.TeardownIncomplete = left
			h.logf("  teardown: still there after %s: %v", h.cfg.ReadyTimeout, left)
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
	r.TeardownMs = ms(time.Since(start))
	kw, _, _ := kindWrites(writes0, h.operator.writes.snapshot())
	if r.TeardownObjects > 0 {
		r.TeardownWritesPerObject = float64(kw) / float64(r.TeardownObjects)
	}
	// Every finalizer ran after its Vercel delete was answered, so what is
	// left now stays; a short grace period covers nothing but is cheap.
	for i := 0; ; i++ {
		r.LeakedSandboxes, r.LeakedSnapshots = h.vercelInventory().newSince(inv0)
		if len(r.LeakedSandboxes)+len(r.LeakedSnapshots) == 0 || i == 10 {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	emu := countsDelta(emu0, h.emu.Counts())
	r.TeardownVercelPerObject = float64(emu["total"]) / float64(max(1, r.TeardownObjects))
	delete(emu, "total")
	r.TeardownVercelByEndpoint = emu
	if len(r.LeakedSandboxes)+len(r.LeakedSnapshots) > 0 {
		h.logf("  left in Vercel after deleting everything: sandboxes %v, snapshots %v", firstN(r.LeakedSandboxes, 10), firstN(r.LeakedSnapshots, 10))
	}
	return nil
}

// countIn counts the objects of obj's kind in ns from a one-item page of
// metadata (the API server's remaining-item count): polling a full list of
// a thousand objects would cost the process, which also runs the manager,
// more CPU than the deletions it waits for.
func (h *harness) countIn(ctx context.Context, obj client.Object, ns string) (int, error) {
	gvk, err := apiutil.GVKForObject(obj, h.scheme)
	if err != nil {
		return 0, err
	}
	l := &metav1.PartialObjectMetadataList{}
	l.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
	if err := h.kube.List(ctx, l, client.InNamespace(ns), client.Limit(1)); err != nil {
		return 0, err
	}
	n := len(l.Items)
	switch {
	case l.RemainingItemCount != nil:
		n += int(*l.RemainingItemCount)
	case l.Continue != "":
		return 0, fmt.Errorf("countIn %s: no remaining-item count", gvk.Kind)
	}
	return n, nil
}

// vercelInventory is what the emulator holds: live sandboxes by name,
// snapshots not deleted (nor expired) by id.
type vercelInventory struct{ sandboxes, snapshots map[string]bool }

func (h *harness) vercelInventory() vercelInventory {
	inv := vercelInventory{sandboxes: map[string]bool{}, snapshots: map[string]bool{}}
	for _, s := range h.emu.LiveSandboxes() {
		inv.sandboxes[s.Name] = true
	}
	for _, s := range h.emu.Snapshots() {
		if s.Status != vercel.SnapshotDeleted {
			inv.snapshots[s.ID] = true
		}
	}
	return inv
}

// newSince lists what inv holds that old did not.
func (inv vercelInventory) newSince(old vercelInventory) (sandboxes, snapshots []string) {
	sandboxes, snapshots = []string{}, []string{}
	for n := range inv.sandboxes {
		if !old.sandboxes[n] {
			sandboxes = append(sandboxes, n)
		}
	}
	for id := range inv.snapshots {
		if !old.snapshots[id] {
			snapshots = append(snapshots, id)
		}
	}
	sort.Strings(sandboxes)
	sort.Strings(snapshots)
	return sandboxes, snapshots
}

// waitObjectsReady collects, through the watch w (opened with opts), the time
// after start at which ready first held for each object, until n did or the
// timeout passed. A watch the API server closes (it drops watchers that fall
// behind on a starved machine) is resumed from the last resourceVersion seen,
// or from a fresh list. The result is sorted.
func (h *harness) waitObjectsReady(ctx context.Context, w watch.Interface, newList func() client.ObjectList, opts []client.ListOption, n int, timeout time.Duration, start time.Time, ready func(client.Object) bool) ([]time.Duration, error) {
	seen := make(map[string]bool, n)
	out := make([]time.Duration, 0, n)
	var lastRV string
	record := func(o client.Object) {
		if !seen[o.GetName()] && ready(o) {
			seen[o.GetName()] = true
			out = append(out, time.Since(start))
		}
	}
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	defer func() { w.Stop() }()
	for len(out) < n {
		select {
		case ev, ok := <-w.ResultChan():
			if ok && ev.Type != watch.Error {
				if o, isObj := ev.Object.(client.Object); isObj {
					lastRV = o.GetResourceVersion()
					record(o)
				}
				continue
			}
			w.Stop()
			if ok || lastRV == "" {
				l := newList()
				if err := h.kube.List(ctx, l, opts...); err != nil {
					return out, err
				}
				items, err := meta.ExtractList(l)
				if err != nil {
					return out, err
				}
				for _, it := range items {
					if o, isObj := it.(client.Object); isObj {
						record(o)
					}
				}
				lastRV = l.GetResourceVersion()
			}
			var err error
			resume := append(slices.Clone(opts), &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: lastRV}})
			if w, err = h.kube.Watch(ctx, newList(), resume...); err != nil {
				return out, fmt.Errorf("resume watch: %w", err)
			}
		case <-deadline.C:
			sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
			return out, nil
		case <-ctx.Done():
			return out, ctx.Err()
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out, nil
}

// kindWrites sums, between two write-counter snapshots, the writes to the
// operator's kinds (with subresources) and to events, and returns the
// former by request ("PATCH sandboxsnapshots/status").
func kindWrites(before, after map[string]int64) (kinds, events int64, by map[string]int64) {
	by = map[string]int64{}
	for k, v := range after {
		d := v - before[k]
		if d == 0 {
			continue
		}
		_, res, _ := strings.Cut(k, " ")
		switch strings.SplitN(res, "/", 2)[0] {
		case "sandboxes", "sandboxsnapshots", "sandboxforks":
			kinds += d
			by[k] = d
		case "events":
			events += d
		}
	}
	return kinds, events, by
}

func countsDelta(a, b map[string]int64) map[string]int64 {
	out := map[string]int64{}
	for k, v := range b {
		if d := v - a[k]; d != 0 {
			out[k] = d
		}
	}
	return out
}

func perObject(m map[string]int64, n int) map[string]float64 {
	out := make(map[string]float64, len(m))
	for k, v := range m {
		out[k] = float64(v) / float64(n)
	}
	return out
}

func describe(name, phase string, conds []metav1.Condition) string {
	s := name + " (phase " + phase + ")"
	if c := meta.FindStatusCondition(conds, sandboxv1.ConditionReady); c != nil {
		s += ": " + c.Reason + ": " + c.Message
	}
	return s
}

func firstN(s []string, n int) []string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// breakdown renders a per-object breakdown as "k v, k v" by decreasing
// value.
func breakdown(m map[string]float64) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if m[keys[i]] != m[keys[j]] {
			return m[keys[i]] > m[keys[j]]
		}
		return keys[i] < keys[j]
	})
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %.2f", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

// markdownKinds prints the kinds phase's tables.
func markdownKinds(w io.Writer, k *KindsResult) {
	fmt.Fprintln(w)
	fmt.Fprintf(w, "Snapshots and forks (latency %gms): SandboxSnapshots capture one Ready Sandbox each, all created at once; one SandboxFork's children boot from one SandboxSnapshot. Time to Ready from the burst's start; per object: the manager's writes to Sandboxes, SandboxSnapshots and SandboxForks (a capture also writes its Sandbox; the fork's own writes are spread over its children) and Vercel requests, until the last one was Ready.\n\n", k.LatencyMs)
	fmt.Fprintln(w, "| kind | objects | p50 | p95 | p99 | drain | failed | k8s writes/obj | events/obj | Vercel req/obj | teardown | left in Vercel |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|---|")
	rows := []*KindResult{k.Snapshot, k.Fork}
	for _, r := range rows {
		if r == nil {
			continue
		}
		label := "SandboxSnapshot (capture)"
		if r.Kind == KindFork {
			label = "SandboxFork children"
		}
		fmt.Fprintf(w, "| %s | %d | %s | %s | %s | %s | %d | %.2f | %.2f | %.2f | %s | %d sandboxes, %d snapshots |\n", label, r.Objects,
			secs(r.P50Ms), secs(r.P95Ms), secs(r.P99Ms), secs(r.DrainMs), r.Failed,
			r.WritesPerObject, r.EventWritesPerObject, r.VercelRequestsPerObject, secs(r.TeardownMs),
			len(r.LeakedSandboxes), len(r.LeakedSnapshots))
	}
	fmt.Fprintln(w)
	for _, r := range rows {
		if r == nil {
			continue
		}
		fmt.Fprintf(w, "* %s writes/obj: %s\n", r.Kind, breakdown(r.WritesByRequest))
		fmt.Fprintf(w, "* %s Vercel req/obj: %s\n", r.Kind, breakdown(r.VercelRequestsByEndpoint))
		fmt.Fprintf(w, "* %s teardown: %d objects deleted at once, %.2f writes and %.2f Vercel requests per object (%s)\n", r.Kind,
			r.TeardownObjects, r.TeardownWritesPerObject, r.TeardownVercelPerObject, breakdown(perObject(r.TeardownVercelByEndpoint, max(1, r.TeardownObjects))))
		if r.Kind == KindFork {
			fmt.Fprintf(w, "* SandboxFork Ready (all %d children): %s\n", r.Objects, secs(r.ForkReadyMs))
		}
		for _, s := range r.NotReady {
			fmt.Fprintf(w, "* not Ready: %s\n", s)
		}
		if len(r.TeardownIncomplete) > 0 {
			fmt.Fprintf(w, "* teardown incomplete: %v\n", r.TeardownIncomplete)
		}
		if n := len(r.LeakedSandboxes) + len(r.LeakedSnapshots); n > 0 {
			fmt.Fprintf(w, "* left in Vercel: %v %v\n", firstN(r.LeakedSandboxes, 5), firstN(r.LeakedSnapshots, 5))
		}
	}
}
