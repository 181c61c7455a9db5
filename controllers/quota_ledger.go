package controllers

// The quota ledger: the manager's one account, per namespace, of what the
// Sandboxes hold against the namespace's SandboxQuotas. The Sandbox reconciler
// asks it before a call to Vercel that would start a session (admit), and
// tells it what each reconcile left (settle). A grant is recorded under the
// namespace's lock before the call, so parallel reconciles never let more
// start than the quotas allow; status writes reach the cache later, which is
// why the ledger, not the cache, is the account. It is rebuilt from the
// Sandboxes' status when the manager starts (only the leader reconciles, and
// the account of one namespace never needs another's).

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
)

// defaultVCPUs is what Vercel gives a session whose spec sets no vcpus.
const defaultVCPUs = 2

// QuotaLedger grants Sandboxes the capacity to start sessions within the
// SandboxQuotas of their namespace. The zero value is not usable; nil admits
// everything (no quotas enforced).
type QuotaLedger struct {
	// reader is the manager's cache: Sandboxes to rebuild from, quotas to
	// read limits from.
	reader client.Reader

	mu         sync.Mutex
	namespaces map[string]*nsLedger
	// sandboxQ and quotaQ are the Sandbox and SandboxQuota controllers'
	// queues, once they started: a release wakes the waiters, any change
	// wakes the quotas whose status.used it changes.
	sandboxQ, quotaQ workqueue.TypedRateLimitingInterface[reconcile.Request]
}

// NewQuotaLedger returns an empty ledger reading from the manager's cache.
func NewQuotaLedger(cache client.Reader) *QuotaLedger {
	return &QuotaLedger{reader: cache, namespaces: map[string]*nsLedger{}}
}

// nsLedger is one namespace's account.
type nsLedger struct {
	mu    sync.Mutex
	built bool
	// holders are the Sandboxes that hold a Vercel sandbox or a running
	// session, by name.
	holders map[string]holding
	// waiters are the Sandboxes refused a start, by name, until they start
	// or stop waiting.
	waiters map[string]waiter
}

type holding struct {
	uid     types.UID
	remote  bool // has a Vercel sandbox (counts against sandboxes)
	running bool // its session may run (runningSandboxes, runningVCPUs)
	vcpus   int64
}

type waiter struct {
	created time.Time
	name    string
	need    usage
}

// usage is an amount of the counted resources.
type usage struct {
	sandboxes, running, vcpus int64
}

func (u usage) add(o usage) usage {
	return usage{u.sandboxes + o.sandboxes, u.running + o.running, u.vcpus + o.vcpus}
}

// Usage is what a namespace's Sandboxes hold, as the ledger counts it.
type Usage struct {
	Sandboxes, RunningSandboxes, RunningVCPUs int64
}

func (l *QuotaLedger) namespace(ns string) *nsLedger {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := l.namespaces[ns]
	if n == nil {
		n = &nsLedger{holders: map[string]holding{}, waiters: map[string]waiter{}}
		l.namespaces[ns] = n
	}
	return n
}

// build fills a namespace's account from its Sandboxes' status, on first use
// after the manager started. Called with n.mu held.
func (l *QuotaLedger) build(ctx context.Context, ns string, n *nsLedger) error {
	if n.built {
		return nil
	}
	list := &sandboxv1.SandboxList{}
	if err := l.reader.List(ctx, list, client.InNamespace(ns)); err != nil {
		return fmt.Errorf("list the Sandboxes of namespace %s for its quota: %w", ns, err)
	}
	for i := range list.Items {
		s := &list.Items[i]
		if h, ok := holdingOf(s); ok {
			n.holders[s.Name] = h
		}
	}
	n.built = true
	return nil
}

// holdingOf is what a Sandbox holds according to its status: a Vercel
// sandbox once a session was recorded, and a running session until the
// session is known to have stopped.
func holdingOf(s *sandboxv1.Sandbox) (holding, bool) {
	st := &s.Status
	if st.SessionID == "" {
		return holding{}, false
	}
	return holding{uid: s.UID, remote: true, running: sessionMayRun(st.Phase) && st.Phase != sandboxv1.SandboxPending, vcpus: vcpusOf(s)}, true
}

func vcpusOf(s *sandboxv1.Sandbox) int64 {
	if r := s.Spec.Resources; r != nil && r.VCPUs != nil {
		return int64(*r.VCPUs)
	}
	return defaultVCPUs
}

// used sums the holdings. Called with n.mu held.
func (n *nsLedger) used() usage {
	var u usage
	for _, h := range n.holders {
		if h.remote {
			u.sandboxes++
		}
		if h.running {
			u.running++
			u.vcpus += h.vcpus
		}
	}
	return u
}

// Admit grants sbx a session start (a create, a resume or a re-create) within
// the SandboxQuotas of its namespace, or refuses it with the reason in words.
// A grant counts the Sandbox as running at once. Sandboxes created earlier
// that also wait are served first: capacity they need is not granted to a
// later one. A refused Sandbox is woken when capacity frees.
func (l *QuotaLedger) Admit(ctx context.Context, sbx *sandboxv1.Sandbox) (bool, string, error) {
	if l == nil {
		return true, "", nil
	}
	n := l.namespace(sbx.Namespace)
	n.mu.Lock()
	granted, msg, err := l.admitLocked(ctx, n, sbx)
	var wake []string
	if granted && len(n.waiters) > 0 {
		// A waiter refused only because this one came first may fit now.
		wake = waiterNames(n)
	}
	n.mu.Unlock()
	if granted {
		l.wakeQuotas(ctx, sbx.Namespace)
		l.wakeSandboxes(sbx.Namespace, wake)
	}
	return granted, msg, err
}

func (l *QuotaLedger) admitLocked(ctx context.Context, n *nsLedger, sbx *sandboxv1.Sandbox) (bool, string, error) {
	if err := l.build(ctx, sbx.Namespace, n); err != nil {
		return false, "", err
	}
	h, ok := n.holders[sbx.Name]
	if ok && h.uid != sbx.UID {
		// A Sandbox of the same name that is gone.
		h, ok = holding{}, false
	}
	if h.running {
		return true, "", nil
	}
	quotas := &sandboxv1.SandboxQuotaList{}
	if err := l.reader.List(ctx, quotas, client.InNamespace(sbx.Namespace)); err != nil {
		return false, "", fmt.Errorf("list the SandboxQuotas of namespace %s: %w", sbx.Namespace, err)
	}
	need := usage{running: 1, vcpus: vcpusOf(sbx)}
	if !h.remote {
		need.sandboxes = 1
	}
	if len(quotas.Items) > 0 {
		ahead, err := l.ahead(ctx, n, sbx)
		if err != nil {
			return false, "", err
		}
		used := n.used()
		if msg := refusal(quotas.Items, used, ahead, need); msg != "" {
			n.waiters[sbx.Name] = waiter{created: sbx.CreationTimestamp.Time, name: sbx.Name, need: need}
			return false, msg, nil
		}
	}
	delete(n.waiters, sbx.Name)
	n.holders[sbx.Name] = holding{uid: sbx.UID, remote: true, running: true, vcpus: need.vcpus}
	return true, "", nil
}

// ahead is what the Sandboxes created before sbx that wait to start need:
// those refused before, and those never created that have not had their
// turn yet (their first reconcile may still be queued behind this one).
// Called with n.mu held.
func (l *QuotaLedger) ahead(ctx context.Context, n *nsLedger, sbx *sandboxv1.Sandbox) (usage, error) {
	var u usage
	seen := map[string]bool{}
	for _, w := range n.waiters {
		if w.name != sbx.Name && before(w.created, w.name, sbx) {
			u = u.add(w.need)
			seen[w.name] = true
		}
	}
	list := &sandboxv1.SandboxList{}
	if err := l.reader.List(ctx, list, client.InNamespace(sbx.Namespace)); err != nil {
		return usage{}, fmt.Errorf("list the Sandboxes of namespace %s for its quota: %w", sbx.Namespace, err)
	}
	for i := range list.Items {
		s := &list.Items[i]
		if seen[s.Name] || s.Name == sbx.Name || !before(s.CreationTimestamp.Time, s.Name, sbx) || !awaitsFirstStart(s) {
			continue
		}
		if h, ok := n.holders[s.Name]; ok && h.uid == s.UID {
			continue
		}
		u = u.add(usage{sandboxes: 1, running: 1, vcpus: vcpusOf(s)})
	}
	return u, nil
}

// before reports whether the object (created, name) comes before sbx in
// creation order: creation time, then name.
func before(created time.Time, name string, sbx *sandboxv1.Sandbox) bool {
	t := sbx.CreationTimestamp.Time
	if !created.Equal(t) {
		return created.Before(t)
	}
	return name < sbx.Name
}

// awaitsFirstStart reports whether a Sandbox has never had a session and is
// on its way to its first one: not paused, adopting or being deleted, and not
// held up by anything but its turn. (A Sandbox created with spec.state
// Stopped is created too, so it takes its turn.)
func awaitsFirstStart(s *sandboxv1.Sandbox) bool {
	if s.Status.SessionID != "" || !s.DeletionTimestamp.IsZero() ||
		s.Annotations[sandboxv1.AnnotationPaused] == "true" || s.Spec.Source.Adopt != nil {
		return false
	}
	c := meta.FindStatusCondition(s.Status.Conditions, sandboxv1.ConditionReady)
	return c == nil || c.Reason == sandboxv1.ReasonCreating || c.Reason == sandboxv1.ReasonQuotaExceeded
}

// refusal names the first quota and resource that cannot grant need on top
// of used and of what the Sandboxes ahead need; "" when all can.
func refusal(quotas []sandboxv1.SandboxQuota, used, ahead, need usage) string {
	sort.Slice(quotas, func(i, j int) bool { return quotas[i].Name < quotas[j].Name })
	for i := range quotas {
		q := &quotas[i]
		if !q.DeletionTimestamp.IsZero() {
			continue
		}
		h := q.Spec.Hard
		for _, c := range []struct {
			name             string
			hard             *int64
			used, ahead, add int64
		}{
			{sandboxv1.QuotaSandboxes, h.Sandboxes, used.sandboxes, ahead.sandboxes, need.sandboxes},
			{sandboxv1.QuotaRunningSandboxes, h.RunningSandboxes, used.running, ahead.running, need.running},
			{sandboxv1.QuotaRunningVCPUs, h.RunningVCPUs, used.vcpus, ahead.vcpus, need.vcpus},
		} {
			if c.hard == nil || c.add == 0 || c.used+c.ahead+c.add <= *c.hard {
				continue
			}
			// The message stays the same while the Sandbox waits, so that
			// waking it writes nothing unless it can start.
			return fmt.Sprintf("SandboxQuota %s allows %s %d; this Sandbox waits and starts by itself, in creation order, when capacity frees",
				q.Name, c.name, *c.hard)
		}
	}
	return ""
}

// Settle records what a Sandbox holds after a reconcile, from the status the
// reconcile left (nil: the Sandbox is gone). Capacity it released wakes the
// waiters.
func (l *QuotaLedger) Settle(ctx context.Context, key types.NamespacedName, sbx *sandboxv1.Sandbox) {
	if l == nil {
		return
	}
	n := l.namespace(key.Namespace)
	n.mu.Lock()
	if err := l.build(ctx, key.Namespace, n); err != nil {
		// Built on the next use; what this reconcile left is in status.
		n.mu.Unlock()
		return
	}
	old, had := n.holders[key.Name]
	h, holds := holding{}, false
	if sbx != nil {
		h, holds = holdingOf(sbx)
		if had && old.uid == sbx.UID && old.running && !holds && !sbx.DeletionTimestamp.IsZero() {
			// Being deleted before its create was answered: it may run until
			// the finalizer is done.
			h, holds = old, true
		}
	}
	if holds {
		n.holders[key.Name] = h
	} else {
		delete(n.holders, key.Name)
	}
	_, waited := n.waiters[key.Name]
	if waited && (sbx == nil || !isWaiting(sbx)) {
		delete(n.waiters, key.Name)
	} else {
		waited = false
	}
	changed := had != holds || old != h
	released := had && old.running && (!holds || !h.running) || had && old.remote && !holds
	var wake []string
	if released || waited {
		// Freed capacity, or a waiter that no longer waits (started, gone,
		// stopped): the capacity it was owed may go to a later one.
		wake = waiterNames(n)
	}
	n.mu.Unlock()
	if changed {
		l.wakeQuotas(ctx, key.Namespace)
	}
	l.wakeSandboxes(key.Namespace, wake)
}

// isWaiting reports whether a Sandbox waits for quota.
func isWaiting(s *sandboxv1.Sandbox) bool {
	return hasCondition(s.Status.Conditions, sandboxv1.ConditionReady, sandboxv1.ReasonQuotaExceeded)
}

// Usage is what the Sandboxes of ns hold.
func (l *QuotaLedger) Usage(ctx context.Context, ns string) (Usage, error) {
	n := l.namespace(ns)
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := l.build(ctx, ns, n); err != nil {
		return Usage{}, err
	}
	u := n.used()
	return Usage{Sandboxes: u.sandboxes, RunningSandboxes: u.running, RunningVCPUs: u.vcpus}, nil
}

// Wake requeues the Sandboxes of ns that wait for quota: its quotas changed.
func (l *QuotaLedger) Wake(ns string) {
	n := l.namespace(ns)
	n.mu.Lock()
	names := waiterNames(n)
	n.mu.Unlock()
	l.wakeSandboxes(ns, names)
}

// wakeBatch bounds how many waiters one change wakes: the earliest, which
// are served first. Each grant wakes the next ones, so a burst of freed
// capacity is handed on down the line; a later, smaller waiter that could
// pass the earlier ones waits at most quotaRecheck when it is beyond the
// batch.
const wakeBatch = 32

// waiterNames lists the first wakeBatch waiters in creation order. Called
// with n.mu held.
func waiterNames(n *nsLedger) []string {
	ws := make([]waiter, 0, len(n.waiters))
	for _, w := range n.waiters {
		ws = append(ws, w)
	}
	sort.Slice(ws, func(i, j int) bool {
		if !ws[i].created.Equal(ws[j].created) {
			return ws[i].created.Before(ws[j].created)
		}
		return ws[i].name < ws[j].name
	})
	names := make([]string, 0, min(len(ws), wakeBatch))
	for _, w := range ws[:min(len(ws), wakeBatch)] {
		names = append(names, w.name)
	}
	return names
}

func (l *QuotaLedger) wakeSandboxes(ns string, names []string) {
	l.mu.Lock()
	q := l.sandboxQ
	l.mu.Unlock()
	if q == nil {
		return
	}
	for _, name := range names {
		q.Add(reconcile.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: name}})
	}
}

func (l *QuotaLedger) wakeQuotas(ctx context.Context, ns string) {
	l.mu.Lock()
	q := l.quotaQ
	l.mu.Unlock()
	if q == nil {
		return
	}
	quotas := &sandboxv1.SandboxQuotaList{}
	if err := l.reader.List(ctx, quotas, client.InNamespace(ns)); err != nil {
		return
	}
	for i := range quotas.Items {
		q.Add(reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&quotas.Items[i])})
	}
}

// sandboxSource hands the ledger the Sandbox controller's queue, to wake
// waiters with.
func (l *QuotaLedger) sandboxSource() source.Source {
	return source.Func(func(_ context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
		if l != nil {
			l.mu.Lock()
			l.sandboxQ = q
			l.mu.Unlock()
		}
		return nil
	})
}

// quotaSource hands the ledger the SandboxQuota controller's queue.
func (l *QuotaLedger) quotaSource() source.Source {
	return source.Func(func(_ context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
		l.mu.Lock()
		l.quotaQ = q
		l.mu.Unlock()
		return nil
	})
}

// describeUsage is a Usage in words, for events.
func describeUsage(u Usage) string {
	return strings.Join([]string{
		fmt.Sprintf("%s %d", sandboxv1.QuotaSandboxes, u.Sandboxes),
		fmt.Sprintf("%s %d", sandboxv1.QuotaRunningSandboxes, u.RunningSandboxes),
		fmt.Sprintf("%s %d", sandboxv1.QuotaRunningVCPUs, u.RunningVCPUs),
	}, ", ")
}

// SnapshotBytes is the sum of status.sizeBytes over the SandboxSnapshots of ns.
func (l *QuotaLedger) SnapshotBytes(ctx context.Context, ns string) (int64, error) {
	list := &sandboxv1.SandboxSnapshotList{}
	if err := l.reader.List(ctx, list, client.InNamespace(ns)); err != nil {
		return 0, fmt.Errorf("list the SandboxSnapshots of namespace %s for its quota: %w", ns, err)
	}
	var sum int64
	for i := range list.Items {
		sum += list.Items[i].Status.SizeBytes
	}
	return sum, nil
}

// AdmitSnapshot allows a new snapshot in ns unless a SandboxQuota's
// snapshotBytes is already used up. Vercel reports a snapshot's size only
// once it is taken, so the snapshot that crosses the limit is allowed and
// the ones after it are refused; it says why in words.
func (l *QuotaLedger) AdmitSnapshot(ctx context.Context, ns string) (bool, string, error) {
	if l == nil {
		return true, "", nil
	}
	quotas := &sandboxv1.SandboxQuotaList{}
	if err := l.reader.List(ctx, quotas, client.InNamespace(ns)); err != nil {
		return false, "", fmt.Errorf("list the SandboxQuotas of namespace %s: %w", ns, err)
	}
	var limits []sandboxv1.SandboxQuota
	for _, q := range quotas.Items {
		if q.Spec.Hard.SnapshotBytes != nil && q.DeletionTimestamp.IsZero() {
			limits = append(limits, q)
		}
	}
	if len(limits) == 0 {
		return true, "", nil
	}
	used, err := l.SnapshotBytes(ctx, ns)
	if err != nil {
		return false, "", err
	}
	sort.Slice(limits, func(i, j int) bool { return limits[i].Name < limits[j].Name })
	for _, q := range limits {
		if hard := *q.Spec.Hard.SnapshotBytes; used >= hard {
			return false, fmt.Sprintf("SandboxQuota %s allows %s %d and the namespace's snapshots use them up; the snapshot is taken by itself once snapshots are deleted or the limit is raised",
				q.Name, sandboxv1.QuotaSnapshotBytes, hard), nil
		}
	}
	return true, "", nil
}
