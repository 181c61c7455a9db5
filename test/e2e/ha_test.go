package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
	"github.com/getsentry/sandbox-controller/localstack/managerpod"
)

// TestHighAvailability runs two manager processes with leader election, as
// config/manager does with replicas: 2, against one control plane and one
// emulator.
//
// Failover: the leader is SIGKILLed (no release of its Lease) while a burst of
// 50 Sandboxes is being created; the standby takes over once the Lease
// expires, every Sandbox becomes Ready, and the emulator holds exactly one
// Vercel sandbox per Sandbox. These two processes get short lease timings
// (--leader-election-lease-duration=4s, renew 3s, retry 1s) to keep the test
// short; the takeover after a SIGKILL takes about a lease duration.
//
// Rolling update: a new replica starts, the leader gets SIGTERM, and the new
// one holds the Lease in under 5 s, because the leader releases it on
// shutdown (LeaderElectionReleaseOnCancel). The second handover's leader runs
// with the default 15 s lease, so only a release explains a handover under 5 s.
func TestHighAvailability(t *testing.T) {
	e := newEnv(t, envOptions{noManager: true})
	lease := watchLease(t, e)
	short := []string{
		"--leader-election-lease-duration=4s",
		"--leader-election-renew-deadline=3s",
		"--leader-election-retry-period=1s",
	}

	a := e.startManager("manager-a", short...)
	holderA := lease.waitHolder(t, time.Time{}, 60*time.Second, func(h string) bool { return h != "" }).holder
	waitLog(t, a, "successfully acquired lease", 10*time.Second)
	b := e.startManager("manager-b", short...)
	// b is a standby: it serves its probes and leaves the Lease to a.
	time.Sleep(2 * time.Second)
	if h := lease.current(); h != holderA {
		t.Fatalf("the Lease moved to %q while its holder ran", h)
	}
	if strings.Contains(strings.ToLower(b.Log()), "successfully acquired lease") {
		t.Fatal("the standby acquired the Lease while the leader ran")
	}

	const ns, n = "burst", 50
	if _, err := e.kubectl("create", "namespace", ns); err != nil {
		t.Fatal(err)
	}
	burst := createSandboxes(e, ns, n)

	// SIGKILL the leader in the middle of the burst: once it has created a
	// few Vercel sandboxes, before it has made all Sandboxes Ready.
	eventually(t, 60*time.Second, func() error {
		if got := len(vercelSandboxesOf(e, ns)); got < 5 {
			return fmt.Errorf("the leader created %d Vercel sandboxes of the burst, waiting for 5", got)
		}
		return nil
	})
	a.Signal(syscall.SIGKILL)
	killed := time.Now()
	if ready := readySandboxes(t, e, ns); ready >= n {
		t.Fatalf("all %d Sandboxes were Ready before the leader was killed: the kill did not interrupt the burst", ready)
	}
	t.Logf("SIGKILLed the leader with %d Vercel sandboxes of %d created and %d Sandboxes Ready",
		len(vercelSandboxesOf(e, ns)), n, readySandboxes(t, e, ns))
	takeover := lease.waitHolder(t, killed, 60*time.Second, func(h string) bool { return h != "" && h != holderA })
	holderB := takeover.holder
	t.Logf("failover after SIGKILL (no release; lease duration 4s, retry period 1s): the standby held the Lease after %s",
		takeover.at.Sub(killed).Round(time.Millisecond))
	waitLog(t, b, "successfully acquired lease", 10*time.Second)
	if err := <-burst; err != nil {
		t.Fatal(err)
	}

	eventually(t, 3*time.Minute, func() error {
		if b.Exited() {
			t.Fatalf("manager-b exited: %v", b.Err())
		}
		if ready := readySandboxes(t, e, ns); ready != n {
			return fmt.Errorf("%d of %d Sandboxes Ready", ready, n)
		}
		return nil
	})
	checkOneVercelSandboxEach(t, e, ns, n)
	// The standby did not reconcile before it led.
	bLog := b.Log()
	if created := strings.Index(bLog, "Created Vercel sandbox"); created >= 0 &&
		created < strings.Index(strings.ToLower(bLog), "successfully acquired lease") {
		t.Error("manager-b created a Vercel sandbox before it held the Lease")
	}

	// Rolling updates: the new replica stands by before the old one is
	// stopped, as a Deployment waits for the new pod to be Ready (its
	// readinessProbe starts after 5s).
	c := startStandby(t, e, "manager-c") // default timings: lease 15s, retry 2s
	holderC, d1, released1 := handover(t, lease, b, holderB)
	t.Logf("rolling update 1 (SIGTERM to a leader with a 4s lease): the new replica held the Lease after %s (release observed: %v)",
		d1.Round(time.Millisecond), released1)
	d := startStandby(t, e, "manager-d")
	_, d2, released2 := handover(t, lease, c, holderC)
	t.Logf("rolling update 2 (SIGTERM to a leader with the default 15s lease): the new replica held the Lease after %s (release observed: %v)",
		d2.Round(time.Millisecond), released2)
	for i, dt := range []time.Duration{d1, d2} {
		if dt >= 5*time.Second {
			t.Errorf("rolling update %d: handover took %s, want under 5s", i+1, dt.Round(time.Millisecond))
		}
	}
	if !released2 {
		t.Error("rolling update 2: the old leader's release of the Lease (an empty holder) was never observed")
	}
	waitLog(t, d, "successfully acquired lease", 10*time.Second)

	// The last leader reconciles: a new Sandbox becomes Ready.
	e.apply(fmt.Sprintf("apiVersion: sandbox.sentry.io/v1alpha1\nkind: Sandbox\nmetadata:\n  name: after-handover\n  namespace: %s\nspec:\n  source:\n    runtime: node24\n", ns))
	if _, err := e.kubectl("wait", "-n", ns, "--for=condition=Ready", "sandbox/after-handover", "--timeout=60s"); err != nil {
		t.Fatal(err)
	}
	checkOneVercelSandboxEach(t, e, ns, n+1)
}

// startStandby starts a manager and returns once it has been trying to
// acquire the Lease for 5s.
func startStandby(t *testing.T, e *env, name string, extra ...string) *managerpod.Process {
	t.Helper()
	p := e.startManager(name, extra...)
	waitLog(t, p, "attempting to acquire leader lease", 30*time.Second)
	time.Sleep(5 * time.Second)
	return p
}

// handover sends SIGTERM to the leader and returns the next holder of the
// Lease, how long after the signal it was first seen to hold it, and whether
// an empty holder (the old leader's release) was seen in between. The old
// leader must exit cleanly.
//
// After the release the new holder is the standby's next try, which
// client-go schedules every retry period plus up to 1.2 times that again of
// jitter: with the default 2s, up to 4.4s after the release.
func handover(t *testing.T, lease *leaseWatch, old *managerpod.Process, oldHolder string) (string, time.Duration, bool) {
	t.Helper()
	if h := lease.current(); h != oldHolder {
		t.Fatalf("before the handover the Lease is held by %q, want %s's %q", h, old.Name, oldHolder)
	}
	start := time.Now()
	old.Signal(syscall.SIGTERM)
	next := lease.waitHolder(t, start, 60*time.Second, func(h string) bool { return h != "" && h != oldHolder })
	released := lease.seen(start, next.at, "")
	if released {
		rel := lease.waitHolder(t, start, time.Second, func(h string) bool { return h == "" })
		t.Logf("%s released the Lease %s after SIGTERM", old.Name, rel.at.Sub(start).Round(time.Millisecond))
	}
	select {
	case <-old.Done():
	case <-time.After(40 * time.Second):
		t.Fatalf("%s did not exit within 40s of SIGTERM", old.Name)
	}
	if old.Err() != nil {
		t.Errorf("%s exited with %v after SIGTERM, want a clean exit", old.Name, old.Err())
	}
	return next.holder, next.at.Sub(start), released
}

// createSandboxes creates n Sandboxes in ns from 8 clients at once and
// reports the first error (or nil) on the channel when done.
func createSandboxes(e *env, ns string, n int) <-chan error {
	done := make(chan error, 1)
	names := make(chan string, n)
	for i := range n {
		names <- fmt.Sprintf("burst-%02d", i)
	}
	close(names)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	for range 8 {
		wg.Go(func() {
			for name := range names {
				sbx := &sandboxv1.Sandbox{
					ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
					Spec:       sandboxv1.SandboxSpec{Source: sandboxv1.SandboxSource{Runtime: ptrTo(sandboxv1.Runtime("node24"))}},
				}
				if err := e.client.Create(e.ctx, sbx); err != nil {
					mu.Lock()
					if first == nil {
						first = fmt.Errorf("create Sandbox %s: %w", name, err)
					}
					mu.Unlock()
				}
			}
		})
	}
	go func() { wg.Wait(); done <- first }()
	return done
}

func ptrTo[T any](v T) *T { return &v }

func readySandboxes(t *testing.T, e *env, ns string) int {
	t.Helper()
	var list sandboxv1.SandboxList
	must(t, e.client.List(e.ctx, &list, client.InNamespace(ns)))
	ready := 0
	for _, s := range list.Items {
		if meta.IsStatusConditionTrue(s.Status.Conditions, sandboxv1.ConditionReady) {
			ready++
		}
	}
	return ready
}

// vercelSandboxesOf returns the emulator's live sandboxes whose derived name
// puts them in namespace ns.
func vercelSandboxesOf(e *env, ns string) map[string]int {
	out := map[string]int{}
	for _, s := range e.emu.LiveSandboxes() {
		if strings.HasPrefix(s.Name, ns+"-") {
			out[s.Name]++
		}
	}
	return out
}

// checkOneVercelSandboxEach: the emulator holds exactly one live sandbox per
// Sandbox of ns, tagged with that Sandbox's UID, running the session the
// Sandbox reports; none extra, none shared.
func checkOneVercelSandboxEach(t *testing.T, e *env, ns string, n int) {
	t.Helper()
	var list sandboxv1.SandboxList
	must(t, e.client.List(e.ctx, &list, client.InNamespace(ns)))
	if len(list.Items) != n {
		t.Fatalf("%d Sandboxes in %s, want %d", len(list.Items), ns, n)
	}
	byUID := map[types.UID]sandboxv1.Sandbox{}
	for _, s := range list.Items {
		byUID[s.UID] = s
	}
	var ours []string
	perUID := map[types.UID]int{}
	for _, v := range e.emu.LiveSandboxes() {
		uid := types.UID(v.Tags["k8s-uid"])
		s, owned := byUID[uid]
		if !owned && !strings.HasPrefix(v.Name, ns+"-") {
			continue
		}
		ours = append(ours, v.Name)
		if !owned {
			t.Errorf("Vercel sandbox %s (tag k8s-uid=%q) belongs to no Sandbox of %s", v.Name, uid, ns)
			continue
		}
		perUID[uid]++
		if v.Name != s.Status.VercelName {
			t.Errorf("Sandbox %s reports Vercel sandbox %q; the emulator holds %q for it", s.Name, s.Status.VercelName, v.Name)
		}
		if v.CurrentSessionID != s.Status.SessionID {
			t.Errorf("Sandbox %s reports session %q; its Vercel sandbox runs %q", s.Name, s.Status.SessionID, v.CurrentSessionID)
		}
	}
	if len(ours) != n {
		slices.Sort(ours)
		t.Errorf("the emulator holds %d Vercel sandboxes for the %d Sandboxes of %s: %v", len(ours), n, ns, ours)
	}
	for uid, s := range byUID {
		if perUID[uid] != 1 {
			t.Errorf("Sandbox %s has %d Vercel sandboxes, want 1", s.Name, perUID[uid])
		}
	}
}

// waitLog waits until the process's output contains s (case-insensitively).
func waitLog(t *testing.T, p *managerpod.Process, s string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !strings.Contains(strings.ToLower(p.Log()), strings.ToLower(s)) {
		if time.Now().After(deadline) {
			t.Fatalf("%s did not log %q within %s", p.Name, s, timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// leaseWatch records every holder the manager's leader election Lease has,
// with the time each was first seen, from a watch (so a holder that lasts a
// moment, such as the empty one after a release, is not missed).
type leaseWatch struct {
	mu   sync.Mutex
	obs  []leaseObservation
	kick chan struct{}
}

type leaseObservation struct {
	at     time.Time
	holder string
}

func watchLease(t *testing.T, e *env) *leaseWatch {
	t.Helper()
	cs, err := kubernetes.NewForConfig(e.cp.Config)
	must(t, err)
	lw := &leaseWatch{kick: make(chan struct{}, 1)}
	ctx, cancel := context.WithCancel(e.ctx)
	stopped := make(chan struct{})
	t.Cleanup(func() { cancel(); <-stopped })
	go func() {
		defer close(stopped)
		rv := ""
		for ctx.Err() == nil {
			w, err := cs.CoordinationV1().Leases(systemNamespace).Watch(ctx, metav1.ListOptions{
				FieldSelector:   "metadata.name=" + leaseName,
				ResourceVersion: rv,
			})
			if err != nil {
				time.Sleep(100 * time.Millisecond)
				continue
			}
			for ev := range w.ResultChan() {
				l, ok := ev.Object.(*coordinationv1.Lease)
				if !ok {
					rv = "" // an error event (e.g. an expired resource version): start over
					continue
				}
				rv = l.ResourceVersion
				holder := ""
				if l.Spec.HolderIdentity != nil {
					holder = *l.Spec.HolderIdentity
				}
				lw.record(holder)
			}
		}
	}()
	return lw
}

func (lw *leaseWatch) record(holder string) {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	if n := len(lw.obs); n > 0 && lw.obs[n-1].holder == holder {
		return // a renewal
	}
	lw.obs = append(lw.obs, leaseObservation{time.Now(), holder})
	select {
	case lw.kick <- struct{}{}:
	default:
	}
}

// current is the last holder seen ("" before the Lease exists).
func (lw *leaseWatch) current() string {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	if len(lw.obs) == 0 {
		return ""
	}
	return lw.obs[len(lw.obs)-1].holder
}

// waitHolder returns the first holder seen at or after since that satisfies ok.
func (lw *leaseWatch) waitHolder(t *testing.T, since time.Time, timeout time.Duration, ok func(string) bool) leaseObservation {
	t.Helper()
	deadline := time.After(timeout)
	for {
		lw.mu.Lock()
		for _, o := range lw.obs {
			if !o.at.Before(since) && ok(o.holder) {
				lw.mu.Unlock()
				return o
			}
		}
		lw.mu.Unlock()
		select {
		case <-lw.kick:
		case <-time.After(100 * time.Millisecond):
		case <-deadline:
			t.Fatalf("no new holder of Lease %s/%s within %s (last: %q)", systemNamespace, leaseName, timeout, lw.current())
		}
	}
}

// seen reports whether holder was observed between from and to.
func (lw *leaseWatch) seen(from, to time.Time, holder string) bool {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	for _, o := range lw.obs {
		if !o.at.Before(from) && !o.at.After(to) && o.holder == holder {
			return true
		}
	}
	return false
}
