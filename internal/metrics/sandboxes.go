package metrics

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	ctrl "sigs.k8s.io/controller-runtime"
	ctrlcache "sigs.k8s.io/controller-runtime/pkg/cache"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
)

// defaultVCPUs is what Vercel gives a sandbox whose spec names none.
const defaultVCPUs = 2

// phases are the values of the phase label; "Unknown" is a Sandbox no
// reconcile has reached yet.
var phases = []sandboxv1.SandboxPhase{
	sandboxv1.SandboxPending, sandboxv1.SandboxCreating, sandboxv1.SandboxSettingUp,
	sandboxv1.SandboxRunning, sandboxv1.SandboxStopping, sandboxv1.SandboxStopped,
	sandboxv1.SandboxIdle, sandboxv1.SandboxFailed, sandboxv1.SandboxDeleting,
}

var (
	sandboxesDesc = prometheus.NewDesc(namespace+"_sandboxes",
		"Sandboxes in the manager's cache, by status.phase (Unknown: not reconciled yet).", []string{"phase"}, nil)
	sessionSecondsDesc = prometheus.NewDesc(namespace+"_session_seconds_total",
		"Seconds of Vercel sessions up (phase Running or SettingUp) per namespace, counted since this manager became leader.", []string{"namespace"}, nil)
	vcpuSecondsDesc = prometheus.NewDesc(namespace+"_vcpu_seconds_total",
		"Session seconds weighted by the Sandbox's vCPUs per namespace, counted since this manager became leader: the compute a team is running up.", []string{"namespace"}, nil)
)

// sandboxes is the registered collector; it reads whichever tracker is
// running (none before the manager starts, or after it stops).
var sandboxes = &sandboxCollector{}

type sandboxCollector struct{ active atomic.Pointer[tracker] }

func (c *sandboxCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- sandboxesDesc
	ch <- sessionSecondsDesc
	ch <- vcpuSecondsDesc
}

func (c *sandboxCollector) Collect(ch chan<- prometheus.Metric) {
	if t := c.active.Load(); t != nil {
		t.collect(ch)
	}
}

// SetupWithManager registers the metrics and adds a runnable that follows
// Sandboxes through mgr's cache: an informer event handler keeps one small
// record per Sandbox (namespace, phase, current session), from which scrapes
// compute the gauges and counters, and which observes time-to-Ready when a
// Sandbox's Ready condition first turns True. Nothing is read from the API
// server for a scrape. owns, when not nil, picks the namespaces this manager
// reconciles (its shard): each shard's leader counts its own Sandboxes, so
// that summing the shards counts each once.
func SetupWithManager(mgr ctrl.Manager, owns func(namespace string) bool) error {
	Register()
	t := newTracker(time.Now)
	t.informers = mgr.GetCache()
	t.owns = owns
	return mgr.Add(t)
}

// tracker is the per-manager state behind the Sandbox metrics.
type tracker struct {
	now   func() time.Time
	start time.Time

	mu       sync.Mutex
	objs     map[types.UID]*tracked
	finished map[string]*cost // closed sessions, per namespace

	informers ctrlcache.Informers
	// owns picks the namespaces counted (nil: all).
	owns func(namespace string) bool
}

type tracked struct {
	namespace string
	phase     sandboxv1.SandboxPhase
	created   time.Time // creationTimestamp (second precision)
	firstSeen time.Time
	ready     bool // Ready was True at least once since first seen

	session      string    // the session being counted; "" when none
	sessionStart time.Time // counted from here
	vcpus        float64
}

type cost struct{ sessionSeconds, vcpuSeconds float64 }

func newTracker(now func() time.Time) *tracker {
	return &tracker{now: now, objs: map[types.UID]*tracked{}, finished: map[string]*cost{}}
}

// NeedLeaderElection keeps the counters on the leader only: every replica
// counting the same sessions would multiply a team's cost when summed.
func (t *tracker) NeedLeaderElection() bool { return true }

// Start implements manager.Runnable: it follows the Sandbox informer and
// serves the collector until ctx ends.
func (t *tracker) Start(ctx context.Context) error {
	inf, err := t.informers.GetInformer(ctx, &sandboxv1.Sandbox{})
	if err != nil {
		return fmt.Errorf("metrics: Sandbox informer: %w", err)
	}
	t.start = t.now()
	reg, err := inf.AddEventHandler(t.handler())
	if err != nil {
		return fmt.Errorf("metrics: Sandbox event handler: %w", err)
	}
	sandboxes.active.Store(t)
	<-ctx.Done()
	sandboxes.active.CompareAndSwap(t, nil)
	return inf.RemoveEventHandler(reg)
}

func (t *tracker) observe(s *sandboxv1.Sandbox) {
	if t.owns != nil && !t.owns(s.Namespace) {
		return
	}
	now := t.now()
	ready := meta.IsStatusConditionTrue(s.Status.Conditions, sandboxv1.ConditionReady)
	t.mu.Lock()
	defer t.mu.Unlock()
	o := t.objs[s.UID]
	if o == nil {
		// A Sandbox already Ready when first seen (a restart, a new leader)
		// had its time-to-Ready observed before, or never will.
		o = &tracked{namespace: s.Namespace, created: s.CreationTimestamp.Time, firstSeen: now, ready: ready}
		t.objs[s.UID] = o
	} else if ready && !o.ready {
		o.ready = true
		SandboxTimeToReady.Observe(now.Sub(creationTime(o)).Seconds())
	}
	o.phase = s.Status.Phase

	up := (s.Status.Phase == sandboxv1.SandboxRunning || s.Status.Phase == sandboxv1.SandboxSettingUp) && s.Status.SessionID != ""
	if o.session != "" && (!up || o.session != s.Status.SessionID) {
		t.closeSession(o, now)
	}
	if up && o.session == "" {
		o.session = s.Status.SessionID
		o.sessionStart = sessionStart(s.Status.StartedAt, t.start, now)
		o.vcpus = defaultVCPUs
		if r := s.Spec.Resources; r != nil && r.VCPUs != nil {
			o.vcpus = float64(*r.VCPUs)
		}
	}
}

func (t *tracker) forget(s *sandboxv1.Sandbox) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if o := t.objs[s.UID]; o != nil {
		if o.session != "" {
			t.closeSession(o, t.now())
		}
		delete(t.objs, s.UID)
	}
}

// closeSession moves a session's counted time into its namespace's total.
func (t *tracker) closeSession(o *tracked, now time.Time) {
	c := t.finished[o.namespace]
	if c == nil {
		c = &cost{}
		t.finished[o.namespace] = c
	}
	if d := now.Sub(o.sessionStart).Seconds(); d > 0 {
		c.sessionSeconds += d
		c.vcpuSeconds += d * o.vcpus
	}
	o.session = ""
}

func (t *tracker) collect(ch chan<- prometheus.Metric) {
	now := t.now()
	t.mu.Lock()
	byPhase := make(map[sandboxv1.SandboxPhase]int, len(phases)+1)
	perNS := make(map[string]cost, len(t.finished))
	for ns, c := range t.finished {
		perNS[ns] = *c
	}
	for _, o := range t.objs {
		byPhase[o.phase]++
		if o.session != "" {
			c := perNS[o.namespace]
			if d := now.Sub(o.sessionStart).Seconds(); d > 0 {
				c.sessionSeconds += d
				c.vcpuSeconds += d * o.vcpus
			}
			perNS[o.namespace] = c
		}
	}
	t.mu.Unlock()

	known := 0
	for _, p := range phases {
		known += byPhase[p]
		ch <- prometheus.MustNewConstMetric(sandboxesDesc, prometheus.GaugeValue, float64(byPhase[p]), string(p))
	}
	total := 0
	for _, n := range byPhase {
		total += n
	}
	ch <- prometheus.MustNewConstMetric(sandboxesDesc, prometheus.GaugeValue, float64(total-known), "Unknown")
	for ns, c := range perNS {
		ch <- prometheus.MustNewConstMetric(sessionSecondsDesc, prometheus.CounterValue, c.sessionSeconds, ns)
		ch <- prometheus.MustNewConstMetric(vcpuSecondsDesc, prometheus.CounterValue, c.vcpuSeconds, ns)
	}
}

// creationTime is the best estimate of when a Sandbox was created.
// creationTimestamp has second precision; when the informer saw the object
// within that second, the sighting is the tighter bound.
func creationTime(o *tracked) time.Time {
	if d := o.firstSeen.Sub(o.created); d >= 0 && d < time.Second {
		return o.firstSeen
	}
	return o.created
}

// sessionStart counts a session from its start, but never from before the
// tracker started, so a manager restart does not count the same time twice.
func sessionStart(startedAt *metav1.Time, trackerStart, now time.Time) time.Time {
	if startedAt == nil || startedAt.After(now) {
		return now
	}
	if startedAt.Time.Before(trackerStart) {
		return trackerStart
	}
	return startedAt.Time
}

// handler adapts informer events to the tracker.
func (t *tracker) handler() toolscache.ResourceEventHandler {
	return toolscache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if s, ok := obj.(*sandboxv1.Sandbox); ok {
				t.observe(s)
			}
		},
		UpdateFunc: func(_, obj any) {
			if s, ok := obj.(*sandboxv1.Sandbox); ok {
				t.observe(s)
			}
		},
		DeleteFunc: func(obj any) {
			if d, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if s, ok := obj.(*sandboxv1.Sandbox); ok {
				t.forget(s)
			}
		},
	}
}
