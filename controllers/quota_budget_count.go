package controllers

// Counting what a namespace spends, for the budgets of its SandboxQuotas.
// Spend is the growth of the objects' status.usage.total (which the Sandbox
// and SandboxSnapshot controllers fold exactly once per session) between two
// counts, priced per object with its class; plus the memory a running
// session has provisioned so far (Vercel reports a session's figures only
// when it stops, but bills memory by the wall clock, so a long session's
// burn is seen while it runs); plus one creation per new session seen, and
// snapshot storage held × time. The manager remembers each object's highest
// counted figures; after a restart, status.budgets[].counted (the lifetime
// amount at the last count) stands in for them, so what the objects used
// while no manager counted is added once.

import (
	"context"
	"fmt"
	"math/big"
	"sort"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
	"github.com/getsentry/sandbox-controller/internal/cost"
)

// usedObject is what one object used over its life, as last seen.
type usedObject struct {
	class    string
	lifetime cost.Metered // without creations and storage
	session  string
	// storageBytes is snapshot storage it holds now.
	storageBytes int64
}

// budgetTracker is the manager's memory of the objects each SandboxQuota
// last counted, by quota, then object UID.
type budgetTracker struct {
	mu     sync.Mutex
	quotas map[types.NamespacedName]trackedQuota
}

type trackedQuota struct {
	uid     types.UID // a quota of the same name created anew starts over
	objects map[types.UID]usedObject
}

// namespaceUse is one count of a namespace: per object, its figures now,
// and what it used since the quota's last count (nil: the quota has no
// memory of it since the manager started).
type namespaceUse struct {
	objects map[types.UID]usedObject
	deltas  []usedObject
	// tracked is false on a quota's first count since the manager started:
	// deltas are unknown, and status.budgets[].counted stands in.
	tracked bool
	prices  map[string]*sandboxv1.SandboxPrices
	// currency the objects are priced in, once per count (currencyErr: in
	// more than one, which a Money budget cannot add).
	currency    string
	currencyErr error
}

// observe counts the objects of q's namespace against what the tracker
// remembers of q, and remembers them.
func (t *budgetTracker) observe(key types.NamespacedName, uid types.UID, objects map[types.UID]usedObject) (deltas []usedObject, tracked bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.quotas == nil {
		t.quotas = map[types.NamespacedName]trackedQuota{}
	}
	was, tracked := t.quotas[key]
	if !tracked || was.uid != uid {
		t.quotas[key] = trackedQuota{uid: uid, objects: objects}
		return nil, false
	}
	marks := make(map[types.UID]usedObject, len(objects))
	for uid, o := range objects {
		prev, known := was.objects[uid]
		deltas = append(deltas, usedSince(prev, o, known))
		// A running session's provisional memory gives way to Vercel's
		// final figures when it stops, which can be a little less (the
		// count ran ahead of the stop) and come a poll later (a Sandbox
		// stopping shows neither): the highest figures counted stay the
		// mark, so nothing is counted twice.
		marks[uid] = highWater(prev, o)
	}
	t.quotas[key] = trackedQuota{uid: uid, objects: marks}
	return deltas, true
}

// highWater is o with each lifetime figure at least prev's.
func highWater(prev, o usedObject) usedObject {
	o.lifetime.ActiveCPUMillis = max(o.lifetime.ActiveCPUMillis, prev.lifetime.ActiveCPUMillis)
	o.lifetime.MemoryMBMillis = max(o.lifetime.MemoryMBMillis, prev.lifetime.MemoryMBMillis)
	o.lifetime.TransferBytes = max(o.lifetime.TransferBytes, prev.lifetime.TransferBytes)
	return o
}

// forget drops what the tracker remembers of a quota that is gone.
func (t *budgetTracker) forget(key types.NamespacedName) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.quotas, key)
}

// usedSince is what o used since prev (an object first seen: all of it):
// the growth of each lifetime figure (a figure that shrank counts 0), and a
// creation when its session changed.
func usedSince(prev, o usedObject, known bool) usedObject {
	d := usedObject{class: o.class}
	grow := func(now, was int64) int64 { return max(0, now-was) }
	d.lifetime = cost.Metered{
		ActiveCPUMillis: grow(o.lifetime.ActiveCPUMillis, prev.lifetime.ActiveCPUMillis),
		MemoryMBMillis:  grow(o.lifetime.MemoryMBMillis, prev.lifetime.MemoryMBMillis),
		TransferBytes:   grow(o.lifetime.TransferBytes, prev.lifetime.TransferBytes),
	}
	if o.session != "" && (!known || o.session != prev.session) {
		d.lifetime.Creations = 1
	}
	return d
}

// countNamespace reads the namespace's Sandboxes and SandboxSnapshots (a
// SandboxFork's usage is its children's, so forks are not read) and the
// classes' prices.
func (r *SandboxQuotaReconciler) countNamespace(ctx context.Context, q *sandboxv1.SandboxQuota, now time.Time) (namespaceUse, error) {
	objects := map[types.UID]usedObject{}
	sandboxes := &sandboxv1.SandboxList{}
	if err := r.List(ctx, sandboxes, client.InNamespace(q.Namespace)); err != nil {
		return namespaceUse{}, fmt.Errorf("list the Sandboxes of namespace %s for its budgets: %w", q.Namespace, err)
	}
	for i := range sandboxes.Items {
		s := &sandboxes.Items[i]
		o := usedObjectOf(s.Labels[sandboxv1.LabelClass], s.Status.Usage, 0)
		o.lifetime = o.lifetime.Add(provisionedSoFar(s, now))
		objects[s.UID] = o
	}
	snaps := &sandboxv1.SandboxSnapshotList{}
	if err := r.List(ctx, snaps, client.InNamespace(q.Namespace)); err != nil {
		return namespaceUse{}, fmt.Errorf("list the SandboxSnapshots of namespace %s for its budgets: %w", q.Namespace, err)
	}
	for i := range snaps.Items {
		s := &snaps.Items[i]
		// Storage is the snapshot's size while this object holds it.
		objects[s.UID] = usedObjectOf(s.Labels[sandboxv1.LabelClass], s.Status.Usage, s.Status.SizeBytes)
	}
	classes := &sandboxv1.SandboxClassList{}
	if err := r.List(ctx, classes); err != nil {
		return namespaceUse{}, fmt.Errorf("list the SandboxClasses for their prices: %w", err)
	}
	prices := map[string]*sandboxv1.SandboxPrices{}
	for i := range classes.Items {
		prices[classes.Items[i].Name] = classes.Items[i].Spec.Prices
	}
	deltas, tracked := r.budgetTracker().observe(client.ObjectKeyFromObject(q), q.UID, objects)
	use := namespaceUse{objects: objects, deltas: deltas, tracked: tracked, prices: prices}
	use.currency, use.currencyErr = use.priceCurrency()
	return use, nil
}

// provisionedSoFar is the memory s's running session has provisioned from
// its start until now, which Vercel bills and reports when the session
// stops (status.usage folds it then): zero once the session is seen ended.
// Active CPU and transfer are known only at the stop.
func provisionedSoFar(s *sandboxv1.Sandbox, now time.Time) cost.Metered {
	st := s.Status
	if !sessionBilled(s) || st.StartedAt == nil {
		return cost.Metered{}
	}
	elapsed := now.Sub(st.StartedAt.Time).Milliseconds()
	if elapsed <= 0 {
		return cost.Metered{}
	}
	vcpus := int64(st.SessionVCPUs)
	if vcpus == 0 {
		vcpus = vcpusOf(s)
	}
	return cost.Metered{MemoryMBMillis: vcpus * memoryPerVCPU * elapsed}
}

// sessionBilled: s has a session that has not been seen to stop.
func sessionBilled(s *sandboxv1.Sandbox) bool {
	st := s.Status
	if st.SessionID == "" || st.StoppedAt != nil {
		return false
	}
	u := st.Usage
	return u == nil || u.Current == nil || u.Current.SessionID != st.SessionID || u.Current.EndedAt == nil
}

func usedObjectOf(class string, u *sandboxv1.SandboxUsage, storage int64) usedObject {
	o := usedObject{class: class, storageBytes: storage}
	if u == nil {
		return o
	}
	o.lifetime = cost.FromUsage(u.Total)
	if u.Current != nil {
		o.session = u.Current.SessionID
	}
	return o
}

func (r *SandboxQuotaReconciler) budgetTracker() *budgetTracker {
	r.trackerOnce.Do(func() { r.tracker = &budgetTracker{} })
	return r.tracker
}

// budgetAmounts is, for one budget, what the namespace spent since prev's
// count and its lifetime amount now, in the budget's unit.
func (u namespaceUse) budgetAmounts(b sandboxv1.SandboxBudget, prev *sandboxv1.SandboxBudgetStatus, now time.Time) (spent, counted *big.Rat, err error) {
	unit := unitOf(b)
	counted, spent = new(big.Rat), new(big.Rat)
	for _, o := range u.objects {
		a, err := cost.Amount(unit, o.lifetime, u.prices[o.class])
		if err != nil {
			return nil, nil, fmt.Errorf("SandboxClass %s spec.%w", o.class, err)
		}
		counted.Add(counted, a)
	}
	if prev == nil || prev.CountedAt == nil || prev.Unit != unit {
		// A new budget counts from now.
		return spent, counted, nil
	}
	if spent, err = u.grownSince(b, prev, counted); err != nil {
		return nil, nil, err
	}
	if unit == sandboxv1.BudgetMoney {
		storage, err := u.storageSince(prev.CountedAt.Time, now)
		if err != nil {
			return nil, nil, err
		}
		spent.Add(spent, storage)
	}
	return spent, counted, nil
}

// grownSince is what the objects' lifetime figures grew since prev's count,
// in b's unit: per object from the tracker, or, on a quota's first count
// since the manager started, from status.budgets[].counted.
func (u namespaceUse) grownSince(b sandboxv1.SandboxBudget, prev *sandboxv1.SandboxBudgetStatus, counted *big.Rat) (*big.Rat, error) {
	spent := new(big.Rat)
	if !u.tracked {
		was, err := cost.Parse(prev.Counted)
		if err != nil {
			return nil, fmt.Errorf("status.budgets[%s].counted: %w", b.Name, err)
		}
		spent.Sub(counted, was)
		if spent.Sign() < 0 {
			// Objects deleted meanwhile took their usage with them.
			spent.SetInt64(0)
		}
		return spent, nil
	}
	for _, d := range u.deltas {
		a, err := cost.Amount(unitOf(b), d.lifetime, u.prices[d.class])
		if err != nil {
			return nil, fmt.Errorf("SandboxClass %s spec.%w", d.class, err)
		}
		spent.Add(spent, a)
	}
	return spent, nil
}

// storageSince is what the namespace's snapshots cost to store from since
// until now, priced with each one's class.
func (u namespaceUse) storageSince(since, now time.Time) (*big.Rat, error) {
	sum := new(big.Rat)
	dt := now.Sub(since).Milliseconds()
	if dt <= 0 {
		return sum, nil
	}
	for _, o := range u.objects {
		if o.storageBytes == 0 {
			continue
		}
		a, err := cost.Amount(sandboxv1.BudgetMoney, cost.Metered{SnapshotByteSeconds: byteSeconds(o.storageBytes, dt)}, u.prices[o.class])
		if err != nil {
			return nil, fmt.Errorf("SandboxClass %s spec.%w", o.class, err)
		}
		sum.Add(sum, a)
	}
	return sum, nil
}

// byteSeconds is bytes held for ms milliseconds, in byte-seconds: whole
// seconds and the rest apart, so a terabyte held for a month stays within
// int64.
func byteSeconds(bytes, ms int64) int64 {
	return bytes*(ms/1000) + bytes*(ms%1000)/1000
}

// priceCurrency is the one currency the namespace's objects are priced in. Money
// in two currencies cannot be added: a Money budget over them is an error
// naming the classes (budgets in raw units still count).
func (u namespaceUse) priceCurrency() (string, error) {
	byCurrency := map[string]string{} // currency → a class priced in it
	for _, o := range u.objects {
		c := sandboxv1.DefaultCurrency
		if p := u.prices[o.class]; p != nil && p.Currency != "" {
			c = p.Currency
		}
		if _, ok := byCurrency[c]; !ok || o.class < byCurrency[c] {
			byCurrency[c] = o.class
		}
	}
	if len(byCurrency) <= 1 {
		for c := range byCurrency {
			return c, nil
		}
		return sandboxv1.DefaultCurrency, nil
	}
	var parts []string
	for c, class := range byCurrency {
		if class == "" {
			class = "(no class)"
		}
		parts = append(parts, fmt.Sprintf("%s in %s", class, c))
	}
	sort.Strings(parts)
	return "", fmt.Errorf("the namespace's objects are priced in more than one currency (SandboxClass %s): a Money budget cannot add them; give the classes one spec.prices.currency or use a budget in raw units",
		strings.Join(parts, ", "))
}
