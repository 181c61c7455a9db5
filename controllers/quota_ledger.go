package controllers

// The quota ledger: the manager's one account, per namespace, of what the
// Sandboxes and the recipes' builder sandboxes hold against the namespace's
// SandboxQuotas. The Sandbox reconciler asks it before a call to Vercel that
// would start a session (admit), and tells it what each reconcile left
// (settle); the SandboxSnapshot reconciler asks it before it creates a
// builder (AdmitBuild) and tells it when the builder is gone (ReleaseBuild).
// A grant is recorded under the namespace's lock before the call, so
// parallel reconciles never let more start than the quotas allow; status
// writes reach the cache later, which is why the ledger, not the cache, is
// the account. It is rebuilt from the Sandboxes' and SandboxSnapshots'
// status when the manager starts (only the leader reconciles, and the
// account of one namespace never needs another's).
//
// It counts what runs, not what the spec says will run next: a session's
// vCPUs are those it was started with (status.sessionVCPUs) until it stops,
// whatever spec.resources.vcpus says meanwhile.

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
	// budgets are the budgets that refuse starts now (quota_budget_ledger.go).
	budgets budgetRefusals
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
	// session, by name, and the builders of recipe builds, by buildKey.
	holders map[string]holding
	// waiters are the Sandboxes refused a start, by name, and the builds
	// refused a builder, by buildKey, until they start or stop waiting.
	waiters map[string]waiter
}

type holding struct {
	uid     types.UID
	remote  bool // has a Vercel sandbox (counts against sandboxes)
	running bool // its session may run (runningSandboxes, runningVCPUs)
	vcpus   int64
	// build marks a recipe's builder; granted is when it was admitted (a
	// builder no SandboxSnapshot names by then is pruned).
	build   bool
	granted time.Time
	// provisional marks a builder counted at a rebuild for a build whose
	// status says it waited: its builder may have been created just before
	// the manager stopped. Its next admission asks again.
	provisional bool
}

type waiter struct {
	created time.Time
	// name is the waiting object's: a Sandbox, or the SandboxSnapshot whose
	// build waits (build).
	name  string
	need  usage
	build bool
	uid   types.UID
	since time.Time
}

// buildKey is the ledger's key of a builder sandbox: builder names are
// shared by every user of a content hash, and no object name holds a colon.
func buildKey(builder string) string { return "build:" + builder }

// claim is a request to start a session: a Sandbox's or a builder's.
type claim struct {
	key     string
	name    string
	created time.Time
	uid     types.UID
	need    usage // when it holds nothing yet
	build   bool
	what    string // "Sandbox", "build", for the refusal
}

// pruneGrace is how long a builder grant, or a waiting build, is kept
// without the SandboxSnapshot's status to show it: the cache shows the
// status write that follows a grant a moment later.
const pruneGrace = 30 * time.Second

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
	snaps := &sandboxv1.SandboxSnapshotList{}
	if err := l.reader.List(ctx, snaps, client.InNamespace(ns)); err != nil {
		return fmt.Errorf("list the SandboxSnapshots of namespace %s for its quota: %w", ns, err)
	}
	for i := range snaps.Items {
		s := &snaps.Items[i]
		if b := builderHeld(s); b != "" {
			n.holders[buildKey(b)] = holding{uid: s.UID, remote: true, running: true, vcpus: recipeVCPUs(s), build: true, granted: time.Now(),
				provisional: hasCondition(s.Status.Conditions, sandboxv1.ConditionReady, sandboxv1.ReasonQuotaExceeded)}
		}
	}
	n.built = true
	return nil
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
	return l.admit(ctx, sbx.Namespace, claim{key: sbx.Name, name: sbx.Name, created: sbx.CreationTimestamp.Time, uid: sbx.UID,
		need: usage{sandboxes: 1, running: 1, vcpus: vcpusOf(sbx)}, what: "Sandbox"})
}

// AdmitBuild grants a recipe's build its builder sandbox, which runs the
// recipe's commands like a Sandbox's session: it counts against sandboxes,
// runningSandboxes and runningVCPUs (the recipe's resources.vcpus) until
// the builder is deleted (ReleaseBuild), and waits in creation order with
// the Sandboxes when it does not fit.
func (l *QuotaLedger) AdmitBuild(ctx context.Context, snap *sandboxv1.SandboxSnapshot, builder string) (bool, string, error) {
	if l == nil {
		return true, "", nil
	}
	return l.admit(ctx, snap.Namespace, claim{key: buildKey(builder), name: snap.Name, created: snap.CreationTimestamp.Time, uid: snap.UID,
		need: usage{sandboxes: 1, running: 1, vcpus: recipeVCPUs(snap)}, build: true, what: "build"})
}

func (l *QuotaLedger) admit(ctx context.Context, ns string, c claim) (bool, string, error) {
	n := l.namespace(ns)
	n.mu.Lock()
	granted, msg, err := l.admitLocked(ctx, n, ns, c)
	var wake []string
	if granted && len(n.waiters) > 0 {
		// A waiter refused only because this one came first may fit now.
		wake = waiterNames(n)
	}
	n.mu.Unlock()
	if granted {
		l.wakeQuotas(ctx, ns)
		l.wakeSandboxes(ns, wake)
	}
	return granted, msg, err
}

func (l *QuotaLedger) admitLocked(ctx context.Context, n *nsLedger, ns string, c claim) (bool, string, error) {
	if err := l.build(ctx, ns, n); err != nil {
		return false, "", err
	}
	if err := l.prune(ctx, n, ns); err != nil {
		return false, "", err
	}
	h := n.holdingFor(c)
	if h.running {
		return true, "", nil
	}
	need := c.need
	if h.remote {
		need.sandboxes = 0
	}
	if msg, err := l.refuses(ctx, n, ns, c, need); msg != "" || err != nil {
		return false, msg, err
	}
	n.grant(c, need)
	return true, "", nil
}

// holdingFor is what the claimant of c holds now, as far as c is concerned.
func (n *nsLedger) holdingFor(c claim) holding {
	h, ok := n.holders[c.key]
	switch {
	case ok && h.uid != c.uid && !c.build:
		// A Sandbox of the same name that is gone. (A builder is handed
		// over between the users of its hash: it is the same builder.)
		return holding{}
	case ok && h.provisional:
		// Asked for, so its builder does not exist: it waits its turn.
		delete(n.holders, c.key)
		return holding{}
	}
	return h
}

// refuses is why a SandboxQuota of ns refuses c, needing need, now; "" when
// none does. A refused claim waits in n.waiters, since its first refusal.
func (l *QuotaLedger) refuses(ctx context.Context, n *nsLedger, ns string, c claim, need usage) (string, error) {
	quotas := &sandboxv1.SandboxQuotaList{}
	if err := l.reader.List(ctx, quotas, client.InNamespace(ns)); err != nil {
		return "", fmt.Errorf("list the SandboxQuotas of namespace %s: %w", ns, err)
	}
	if len(quotas.Items) == 0 {
		return "", nil
	}
	ahead, err := l.ahead(ctx, n, ns, c)
	if err != nil {
		return "", err
	}
	used := n.used()
	msg := l.budgetRefusal(quotas.Items, c.what)
	if msg == "" {
		msg = refusal(quotas.Items, used, ahead, need, c.what)
	}
	if msg == "" {
		return "", nil
	}
	since := time.Now()
	if w, ok := n.waiters[c.key]; ok {
		since = w.since
	}
	n.waiters[c.key] = waiter{created: c.created, name: c.name, need: need, build: c.build, uid: c.uid, since: since}
	return msg, nil
}

// grant records c's claimant as holding a running session of need, waiting
// no more.
func (n *nsLedger) grant(c claim, need usage) {
	delete(n.waiters, c.key)
	h := holding{uid: c.uid, remote: true, running: true, vcpus: need.vcpus, build: c.build}
	if c.build {
		h.granted = time.Now()
	}
	n.holders[c.key] = h
}

// ReleaseBuild records that the builder sandbox of a build is gone (deleted,
// or found missing): its capacity goes to the waiters.
func (l *QuotaLedger) ReleaseBuild(ctx context.Context, ns, builder string) {
	if l == nil {
		return
	}
	n := l.namespace(ns)
	n.mu.Lock()
	_, had := n.holders[buildKey(builder)]
	delete(n.holders, buildKey(builder))
	var wake []string
	if had {
		wake = waiterNames(n)
	}
	n.mu.Unlock()
	if had {
		l.wakeQuotas(ctx, ns)
		l.wakeSandboxes(ns, wake)
	}
}

// prune drops the builders and waiting builds that no SandboxSnapshot stands
// for any more: its object is gone, or its status says the builder is not
// held (a failed build, a name conflict) or the build no longer waits. A
// builder is normally released as it is deleted (ReleaseBuild); this catches
// an object removed without that. Called with n.mu held.
func (l *QuotaLedger) prune(ctx context.Context, n *nsLedger, ns string) error {
	if !n.hasBuilds() {
		return nil
	}
	list := &sandboxv1.SandboxSnapshotList{}
	if err := l.reader.List(ctx, list, client.InNamespace(ns)); err != nil {
		return fmt.Errorf("list the SandboxSnapshots of namespace %s for its quota: %w", ns, err)
	}
	held := map[string]bool{}
	byUID := map[types.UID]*sandboxv1.SandboxSnapshot{}
	for i := range list.Items {
		s := &list.Items[i]
		byUID[s.UID] = s
		if b := builderHeld(s); b != "" {
			held[buildKey(b)] = true
		}
	}
	now := time.Now()
	n.pruneBuilders(held, now)
	n.pruneBuildWaiters(byUID, now)
	return nil
}

// hasBuilds reports whether n counts a builder or a waiting build.
func (n *nsLedger) hasBuilds() bool {
	for _, h := range n.holders {
		if h.build {
			return true
		}
	}
	for _, w := range n.waiters {
		if w.build {
			return true
		}
	}
	return false
}

// pruneBuilders drops the builders no SandboxSnapshot's status holds, once
// their grant is older than pruneGrace.
func (n *nsLedger) pruneBuilders(held map[string]bool, now time.Time) {
	for k, h := range n.holders {
		if h.build && !held[k] && now.Sub(h.granted) >= pruneGrace {
			delete(n.holders, k)
		}
	}
}

// pruneBuildWaiters drops the waiting builds whose SandboxSnapshot is gone
// or being deleted, or, after pruneGrace, no longer says it waits.
func (n *nsLedger) pruneBuildWaiters(byUID map[types.UID]*sandboxv1.SandboxSnapshot, now time.Time) {
	for k, w := range n.waiters {
		if !w.build {
			continue
		}
		s := byUID[w.uid]
		if s == nil || !s.DeletionTimestamp.IsZero() ||
			now.Sub(w.since) >= pruneGrace && !hasCondition(s.Status.Conditions, sandboxv1.ConditionReady, sandboxv1.ReasonQuotaExceeded) {
			delete(n.waiters, k)
		}
	}
}

// LimitsRunning reports whether a SandboxQuota of ns limits running sessions
// (runningSandboxes or runningVCPUs).
func (l *QuotaLedger) LimitsRunning(ctx context.Context, ns string) (bool, error) {
	if l == nil {
		return false, nil
	}
	quotas := &sandboxv1.SandboxQuotaList{}
	if err := l.reader.List(ctx, quotas, client.InNamespace(ns)); err != nil {
		return false, fmt.Errorf("list the SandboxQuotas of namespace %s: %w", ns, err)
	}
	for _, q := range quotas.Items {
		if q.Spec.Hard.RunningSandboxes != nil || q.Spec.Hard.RunningVCPUs != nil {
			return true, nil
		}
	}
	return false, nil
}

// ahead is what the claims that come before c in creation order and wait
// to start need: those refused before (Sandboxes and builds), and the
// Sandboxes never created that have not had their turn yet (their first
// reconcile may still be queued behind this one). Called with n.mu held.
func (l *QuotaLedger) ahead(ctx context.Context, n *nsLedger, ns string, c claim) (usage, error) {
	var u usage
	seen := map[string]bool{}
	for k, w := range n.waiters {
		if k != c.key && before(w.created, w.name, c) {
			u = u.add(w.need)
			if !w.build {
				seen[w.name] = true
			}
		}
	}
	list := &sandboxv1.SandboxList{}
	if err := l.reader.List(ctx, list, client.InNamespace(ns)); err != nil {
		return usage{}, fmt.Errorf("list the Sandboxes of namespace %s for its quota: %w", ns, err)
	}
	for i := range list.Items {
		s := &list.Items[i]
		if seen[s.Name] || (!c.build && s.Name == c.name) || !before(s.CreationTimestamp.Time, s.Name, c) || !awaitsFirstStart(s) {
			continue
		}
		if h, ok := n.holders[s.Name]; ok && h.uid == s.UID {
			continue
		}
		u = u.add(usage{sandboxes: 1, running: 1, vcpus: vcpusOf(s)})
	}
	return u, nil
}

// before reports whether the object (created, name) comes before the claim
// c in creation order: creation time, then name.
func before(created time.Time, name string, c claim) bool {
	if !created.Equal(c.created) {
		return created.Before(c.created)
	}
	return name < c.name
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
func refusal(quotas []sandboxv1.SandboxQuota, used, ahead, need usage, what string) string {
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
			return fmt.Sprintf("SandboxQuota %s allows %s %d; this %s waits and starts by itself, in creation order, when capacity frees",
				q.Name, c.name, *c.hard, what)
		}
	}
	return ""
}

// Usage is what the Sandboxes of ns hold.
func (l *QuotaLedger) Usage(ctx context.Context, ns string) (Usage, error) {
	n := l.namespace(ns)
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := l.build(ctx, ns, n); err != nil {
		return Usage{}, err
	}
	if err := l.prune(ctx, n, ns); err != nil {
		return Usage{}, err
	}
	u := n.used()
	return Usage{Sandboxes: u.sandboxes, RunningSandboxes: u.running, RunningVCPUs: u.vcpus}, nil
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
