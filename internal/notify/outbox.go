package notify

// The outbox keeps the queue in the API server, so that a restart of the
// manager or a change of leader loses nothing that was written to it
// (docs/decisions/0007-durable-notifications.md).
//
// It is a few ConfigMaps ("segments") of one namespace, the manager's,
// labelled OutboxLabel=<name> and named <name>-<n>: one data key per message,
// whose value is the message as stored (storedEntry). A message is written
// before its first delivery attempt and removed after a 2xx answer, when it
// expires, or when the queue is full and it is the oldest. Writes are merge
// patches (no read, no conflict) and batched: every message enqueued while a
// write is in flight goes in the next one, and removals wait up to Linger to
// share a write with the next additions. A segment holds at most
// SegmentBytes, well under the API server's object size limit, and one that
// is emptied is deleted.
//
// Only the leader runs a Notifier, so one process writes an outbox at a time;
// a new leader reads it once, when it starts.

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/getsentry/sandbox-controller/internal/metrics"
)

// OutboxLabel is on every ConfigMap of an outbox; its value is the outbox's
// Name.
const OutboxLabel = "sandbox.sentry.io/notification-outbox"

// Outbox says where a Notifier keeps its messages until a receiver accepted
// them.
type Outbox struct {
	// Client creates, patches and deletes the segments.
	Client client.Client
	// Reader lists them when the Notifier starts; the manager's API reader,
	// so that no ConfigMap informer (and no cluster-wide list) is needed.
	Reader client.Reader
	// Namespace holds the segments: the manager's own.
	Namespace string
	// Name prefixes the segments' names and is the value of their
	// OutboxLabel; one per leader election (one per shard).
	Name string
	// SegmentBytes bounds the data of one segment (default 256 KiB; an
	// object may be 1 MiB, and every write sends the segment to etcd).
	SegmentBytes int
	// Linger is how long a removal waits to share a write (default 2s).
	Linger time.Duration
}

// storedEntry is one message as an outbox keeps it.
type storedEntry struct {
	Namespace string    `json:"namespace"`
	ID        string    `json:"id"`
	Enqueued  time.Time `json:"enqueued"`
	Body      string    `json:"body"`
}

type segment struct {
	bytes, count int
	// rv is the resourceVersion our last write saw (or the list): a
	// segment is deleted only if nobody wrote it since; "" means it was not
	// seen to exist, so its first write is a create.
	rv string
}

// outboxState is a Notifier's view of its outbox, guarded by Notifier.mu.
type outboxState struct {
	o      Outbox
	loaded bool
	segs   map[int]*segment
	active int
	// adds are the messages not written yet, in enqueue order.
	adds []*entry
	// dels are the keys to remove, per segment, since delsSince.
	dels      map[int][]string
	delsSince time.Time
	kick      chan struct{}
}

func newOutboxState(o Outbox) *outboxState {
	if o.SegmentBytes <= 0 {
		o.SegmentBytes = 256 << 10
	}
	if o.Linger <= 0 {
		o.Linger = 2 * time.Second
	}
	return &outboxState{o: o, segs: map[int]*segment{}, dels: map[int][]string{}, kick: make(chan struct{}, 1)}
}

// newKey names a message in the outbox: its enqueue time first, so that the
// keys sort in enqueue order, and a random part, so that two processes never
// make the same key.
func newKey(at time.Time) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%019d-%08x", at.UnixNano(), binary.BigEndian.Uint32(b[:]))
}

func (e *entry) stored() string {
	b, _ := json.Marshal(storedEntry{Namespace: e.ns, ID: e.id, Enqueued: e.enqueued, Body: string(e.body)})
	return string(b)
}

// trackLocked takes a new message into the outbox: it is delivered once
// written.
func (n *Notifier) trackLocked(e *entry) {
	if n.box == nil {
		e.persisted = true
		return
	}
	e.seg = -1
	n.box.adds = append(n.box.adds, e)
	n.kickOutbox()
}

// untrackLocked removes a message that left the queue from the outbox.
func (n *Notifier) untrackLocked(e *entry) {
	b := n.box
	switch {
	case b == nil:
	case e.persisted:
		if len(b.dels) == 0 {
			b.delsSince = time.Now()
		}
		b.dels[e.seg] = append(b.dels[e.seg], e.key)
		if s := b.segs[e.seg]; s != nil {
			s.bytes -= e.size
			s.count--
		}
		n.kickOutbox()
	case e.writing:
		// Its write is in flight: removed when that write is done.
		e.gone = true
	default:
		b.adds = slices.DeleteFunc(b.adds, func(q *entry) bool { return q == e })
		if s := b.segs[e.seg]; e.seg >= 0 && s != nil {
			s.bytes -= e.size
			s.count--
		}
	}
}

func (n *Notifier) kickOutbox() {
	select {
	case n.box.kick <- struct{}{}:
	default:
	}
}

// runOutbox reads the outbox, then writes what the queue adds and removes
// until ctx ends, and once more after that (bounded by the request timeout),
// so that a manager that stops cleanly leaves every queued message written.
func (n *Notifier) runOutbox(ctx context.Context) {
	logger := log.FromContext(ctx)
	defer n.finalFlush(ctx)
	backoff := n.o.MinBackoff
	for {
		err := n.loadOutbox(ctx)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return
		}
		logger.Error(err, "Failed to read the notification outbox; retrying", "namespace", n.box.o.Namespace, "outbox", n.box.o.Name)
		if !sleep(ctx, backoff) {
			return
		}
		backoff = min(2*backoff, n.o.MaxBackoff)
	}
	n.signal()
	backoff = n.o.MinBackoff
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		if wait := n.flushDue(time.Now(), false); wait > 0 {
			timer.Reset(wait)
			select {
			case <-ctx.Done():
				return
			case <-n.box.kick:
			case <-timer.C:
			}
			continue
		}
		if err := n.flushOutbox(ctx, false); err != nil {
			logger.Error(err, "Failed to write the notification outbox; retrying", "namespace", n.box.o.Namespace, "outbox", n.box.o.Name)
			if !sleep(ctx, backoff) {
				return
			}
			backoff = min(2*backoff, n.o.MaxBackoff)
			continue
		}
		backoff = n.o.MinBackoff
		n.signal()
	}
}

// finalFlush writes what waits once ctx ended (bounded by the request
// timeout), reading the outbox first if that never succeeded, so that a
// manager that stops cleanly leaves every message it queued in the outbox.
func (n *Notifier) finalFlush(ctx context.Context) {
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), n.o.Timeout)
	defer cancel()
	n.mu.Lock()
	loaded := n.box.loaded
	n.mu.Unlock()
	err := error(nil)
	if !loaded {
		err = n.loadOutbox(fctx)
	}
	if err == nil {
		err = n.flushOutbox(fctx, true)
	}
	if err != nil {
		log.FromContext(ctx).Error(err, "Failed to write the notification outbox while stopping: the messages not written are lost", "namespace", n.box.o.Namespace, "outbox", n.box.o.Name)
	}
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// flushDue is how long until the next write: 0 when messages wait to be
// written (or, with force, anything waits), else when the oldest removal has
// lingered enough.
func (n *Notifier) flushDue(now time.Time, force bool) time.Duration {
	n.mu.Lock()
	defer n.mu.Unlock()
	b := n.box
	switch {
	case len(b.adds) > 0:
		return 0
	case len(b.dels) == 0:
		return time.Hour
	case force:
		return 0
	}
	return max(0, b.delsSince.Add(b.o.Linger).Sub(now))
}

// segWrite is one write of a segment: keys to set and keys to remove.
type segWrite struct {
	set map[string]string
	del []string
	// create: the segment is not known to exist, try creating it first.
	create bool
}

// flushOutbox writes what waits, one merge patch per segment touched.
func (n *Notifier) flushOutbox(ctx context.Context, force bool) error {
	n.skipUnconfigured(ctx)
	n.mu.Lock()
	adds, dels, plan := n.box.planLocked(force)
	n.mu.Unlock()

	failed := map[int]error{}
	rvs := map[int]string{}
	for seg, w := range plan {
		rv, err := n.box.o.write(ctx, seg, w)
		if err != nil {
			failed[seg] = err
			continue
		}
		rvs[seg] = rv
	}

	n.mu.Lock()
	n.commitAddsLocked(adds, failed)
	n.box.commitDelsLocked(dels, failed, rvs)
	empty := n.box.emptyLocked()
	n.mu.Unlock()

	n.box.o.deleteSegments(ctx, empty)
	for _, err := range failed {
		return err
	}
	return nil
}

// skipUnconfigured resolves the webhooks of the namespaces of the messages
// about to be written (the read their first attempt would make anyway, and
// reuses) and drops the messages of namespaces that have none: most
// namespaces configure no webhook, and their transitions then cost no write.
func (n *Notifier) skipUnconfigured(ctx context.Context) {
	n.mu.Lock()
	unknown := map[string]bool{}
	for _, e := range n.box.adds {
		if _, fresh := n.knownLocked(e.ns, time.Now()); !fresh {
			unknown[e.ns] = true
		}
	}
	n.mu.Unlock()
	for ns := range unknown {
		// An error leaves the namespace unknown: its messages are written.
		_, _, _ = n.endpoint(ctx, ns)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	var keep []*entry
	for _, e := range n.box.adds {
		if c, fresh := n.knownLocked(e.ns, time.Now()); fresh && !c.ok && e.seg < 0 {
			n.queue = slices.DeleteFunc(n.queue, func(q *entry) bool { return q == e })
			continue
		}
		keep = append(keep, e)
	}
	n.box.adds = keep
	metrics.NotifyQueueDepth.Set(float64(len(n.queue)))
}

// planLocked takes what waits to be written: the new messages (placed in
// segments) and, when there are new messages, when forced or once they
// lingered (flushDue), the removals; and groups them per segment.
func (b *outboxState) planLocked(force bool) ([]*entry, map[int][]string, map[int]*segWrite) {
	adds := b.adds
	b.adds = nil
	var dels map[int][]string
	if len(adds) > 0 || force || len(b.dels) > 0 {
		dels, b.dels = b.dels, map[int][]string{}
	}
	plan := map[int]*segWrite{}
	at := func(seg int) *segWrite {
		if plan[seg] == nil {
			s := b.segs[seg]
			plan[seg] = &segWrite{set: map[string]string{}, create: s == nil || s.rv == ""}
		}
		return plan[seg]
	}
	for _, e := range adds {
		v := e.stored()
		if e.seg < 0 {
			e.size = len(e.key) + len(v)
			e.seg = b.assignLocked(e.size)
		}
		e.writing = true
		at(e.seg).set[e.key] = v
	}
	for seg, keys := range dels {
		at(seg).del = keys
	}
	return adds, dels, plan
}

// commitAddsLocked marks the messages whose write succeeded as written (they
// may be sent now; one removed meanwhile is removed from the outbox in turn),
// and puts the others back, first, for the next write.
func (n *Notifier) commitAddsLocked(adds []*entry, failed map[int]error) {
	b := n.box
	var retry []*entry
	for _, e := range adds {
		e.writing = false
		switch {
		case failed[e.seg] == nil:
			e.persisted = true
			if e.gone {
				n.untrackLocked(e)
			}
		case !e.gone:
			retry = append(retry, e)
		default:
			if s := b.segs[e.seg]; s != nil {
				s.bytes -= e.size
				s.count--
			}
		}
	}
	b.adds = append(retry, b.adds...)
}

// commitDelsLocked puts the removals whose write failed back, and records
// the segments' new resourceVersions.
func (b *outboxState) commitDelsLocked(dels map[int][]string, failed map[int]error, rvs map[int]string) {
	for seg, keys := range dels {
		if failed[seg] == nil {
			continue
		}
		if len(b.dels) == 0 {
			b.delsSince = time.Now()
		}
		b.dels[seg] = append(b.dels[seg], keys...)
	}
	for seg, rv := range rvs {
		if s := b.segs[seg]; s != nil {
			s.rv = rv
		}
	}
}

// assignLocked picks the segment of a new message of size bytes: the active
// one, or the next when it is full.
func (b *outboxState) assignLocked(size int) int {
	s := b.segs[b.active]
	if s != nil && s.count > 0 && s.bytes+size > b.o.SegmentBytes {
		b.active++
		s = nil
	}
	if s == nil {
		s = &segment{}
		b.segs[b.active] = s
	}
	s.bytes += size
	s.count++
	return b.active
}

// emptyLocked forgets the segments other than the active one that hold
// nothing and wait for no write, and returns them with their
// resourceVersions, to be deleted.
func (b *outboxState) emptyLocked() map[int]string {
	out := map[int]string{}
	for seg, s := range b.segs {
		if seg == b.active || s.count > 0 || len(b.dels[seg]) > 0 || s.rv == "" {
			continue
		}
		out[seg] = s.rv
		delete(b.segs, seg)
	}
	return out
}

func (o Outbox) segmentName(seg int) string { return o.Name + "-" + strconv.Itoa(seg) }

// write applies w to a segment with a JSON merge patch (keys set, removed
// keys null), creating the segment when it does not exist, and returns its
// resourceVersion.
func (o Outbox) write(ctx context.Context, seg int, w *segWrite) (string, error) {
	data := map[string]any{}
	for k, v := range w.set {
		data[k] = v
	}
	for _, k := range w.del {
		data[k] = nil
	}
	patch, err := json.Marshal(map[string]any{"data": data})
	if err != nil {
		return "", err
	}
	key := types.NamespacedName{Namespace: o.Namespace, Name: o.segmentName(seg)}
	create := w.create && len(w.set) > 0
	for range 2 {
		if !create {
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}
			err = o.Client.Patch(ctx, cm, client.RawPatch(types.MergePatchType, patch))
			if err == nil {
				return cm.ResourceVersion, nil
			}
			if !apierrors.IsNotFound(err) {
				return "", fmt.Errorf("patch ConfigMap %s: %w", key, err)
			}
			if len(w.set) == 0 {
				return "", nil // nothing to remove from a segment that is gone
			}
		}
		create = false
		cm := &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name, Labels: map[string]string{OutboxLabel: o.Name}},
			Data:       w.set,
		}
		err = o.Client.Create(ctx, cm)
		if err == nil {
			return cm.ResourceVersion, nil
		}
		if !apierrors.IsAlreadyExists(err) {
			return "", fmt.Errorf("create ConfigMap %s: %w", key, err)
		}
		// Created between the patch and the create: patch it.
	}
	return "", fmt.Errorf("write ConfigMap %s: %w", key, err)
}

// deleteSegments deletes emptied segments unless they were written since
// (best effort: a segment left behind is read, and deleted, at the next start).
func (o Outbox) deleteSegments(ctx context.Context, segs map[int]string) {
	for seg, rv := range segs {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: o.Namespace, Name: o.segmentName(seg)}}
		if err := o.Client.Delete(ctx, cm, client.Preconditions{ResourceVersion: &rv}); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			log.FromContext(ctx).V(1).Info("Failed to delete an emptied notification outbox segment", "configMap", cm.Name, "error", err.Error())
		}
	}
}

// loadOutbox reads the outbox into the queue: the messages a previous leader
// had not delivered go first, in enqueue order, then those enqueued since
// this Notifier was made, which are written next.
func (n *Notifier) loadOutbox(ctx context.Context) error {
	o := n.box.o
	var list corev1.ConfigMapList
	if err := o.Reader.List(ctx, &list, client.InNamespace(o.Namespace), client.MatchingLabels{OutboxLabel: o.Name}); err != nil {
		return fmt.Errorf("list the ConfigMaps labelled %s=%s in %s: %w", OutboxLabel, o.Name, o.Namespace, err)
	}
	n.mu.Lock()
	b := n.box
	known := map[string]bool{}
	for _, e := range n.queue {
		known[e.key] = true
	}
	maxSeg := -1
	for _, cm := range list.Items {
		if seg, ok := n.loadSegmentLocked(&cm, known); ok {
			maxSeg = max(maxSeg, seg)
		}
	}
	if maxSeg >= 0 {
		b.active = maxSeg
		if b.segs[maxSeg].bytes >= o.SegmentBytes {
			b.active++
		}
	}
	if len(b.dels) > 0 {
		b.delsSince = time.Now()
	}
	sort.SliceStable(n.queue, func(i, j int) bool { return n.queue[i].key < n.queue[j].key })
	for len(n.queue) > n.o.QueueSize && n.dropOldestLocked() {
	}
	b.loaded = true
	metrics.NotifyQueueDepth.Set(float64(len(n.queue)))
	empty := b.emptyLocked()
	n.mu.Unlock()
	o.deleteSegments(ctx, empty)
	return nil
}

// loadSegmentLocked queues the messages of one segment that are not known
// yet, and marks the values that are not messages for removal (counted as
// invalid drops); ok is false when cm is not a segment of this outbox.
func (n *Notifier) loadSegmentLocked(cm *corev1.ConfigMap, known map[string]bool) (int, bool) {
	b := n.box
	prefix := b.o.Name + "-"
	seg, err := strconv.Atoi(strings.TrimPrefix(cm.Name, prefix))
	if err != nil || !strings.HasPrefix(cm.Name, prefix) || seg < 0 {
		return 0, false // not a segment of ours, whatever its label says
	}
	s := &segment{rv: cm.ResourceVersion}
	b.segs[seg] = s
	for key, v := range cm.Data {
		e, ok := loadedEntry(key, v, seg)
		switch {
		case !ok:
			metrics.NotifyDropped.WithLabelValues("invalid").Inc()
			b.dels[seg] = append(b.dels[seg], key)
		case !known[key]:
			s.bytes += e.size
			s.count++
			n.queue = append(n.queue, e)
		}
	}
	return seg, true
}

// loadedEntry is the queue entry of a stored message; ok is false when the
// value is not one.
func loadedEntry(key, value string, seg int) (*entry, bool) {
	var s storedEntry
	if err := json.Unmarshal([]byte(value), &s); err != nil || s.Namespace == "" || s.ID == "" || s.Body == "" {
		return nil, false
	}
	return &entry{ns: s.Namespace, id: s.ID, body: []byte(s.Body), enqueued: s.Enqueued, key: key, seg: seg, persisted: true, size: len(key) + len(value)}, true
}
