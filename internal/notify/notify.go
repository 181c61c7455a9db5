// Package notify delivers CloudEvents to the webhook a namespace configures,
// so that clients that cannot hold a watch learn of the transitions they wait
// for without polling.
//
// Enqueue never blocks: messages wait in a bounded queue (the oldest waiting
// one is dropped, and counted, when it is full) and a few workers deliver
// them. Each namespace has at most one message in flight and its messages
// are delivered in order, so a receiver that hangs holds one worker at a time
// (for at most the request timeout) and never delays the other namespaces by
// more than that. A failed attempt is retried with exponential backoff until
// the message is older than MaxAge. With an Outbox the queue is kept in the
// API server (outbox.go): a message is written there before it is first
// sent, so delivery is at least once across restarts and changes of leader.
//
// Every delivery is signed as Standard Webhooks specifies (signature.go), so
// that a receiver verifies it with any library of that specification.
//
// The receiver is chosen by whoever may write a namespace's ConfigMap, so the
// notifier connects only to public addresses unless the operator allowed
// others (dial.go), signs only with a Secret labelled for it (config.go), and
// reports each refusal as a Warning event on the ConfigMap.
package notify

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/getsentry/sandbox-controller/internal/metrics"
)

// Event is one transition to announce. The fields become the CloudEvent's
// attributes; Data its data, marshalled to JSON.
type Event struct {
	// Namespace decides the webhook.
	Namespace string
	// ID is the same for every observation of one transition, so receivers
	// can drop duplicates.
	ID      string
	Type    string
	Source  string
	Subject string
	Time    time.Time
	Data    any
}

// cloudEvent is CloudEvents 1.0 in JSON structured mode.
type cloudEvent struct {
	SpecVersion     string    `json:"specversion"`
	ID              string    `json:"id"`
	Source          string    `json:"source"`
	Type            string    `json:"type"`
	Subject         string    `json:"subject,omitempty"`
	Time            time.Time `json:"time"`
	DataContentType string    `json:"datacontenttype"`
	Data            any       `json:"data,omitempty"`
}

// Endpoint is where a namespace's messages go and the key that signs them.
type Endpoint struct {
	URL string
	// Key is the value stored in the signing Secret: the key of the
	// deprecated X-Sandbox-Signature, and the Standard Webhooks key as
	// StandardKey derives it.
	Key []byte
	// Source is the object that configures it (the ConfigMap), which the
	// Warning events about refused deliveries are about; nil: none.
	Source runtime.Object
}

// Resolver returns the webhook of a namespace; ok is false when it has none.
// An error (a configuration that cannot be used, or an API error) fails the
// attempt, which is retried; a *ConfigError is also reported as an event.
type Resolver func(ctx context.Context, namespace string) (ep Endpoint, ok bool, err error)

// Options configure a Notifier; zero values take the defaults.
type Options struct {
	// Resolve finds a namespace's webhook; required.
	Resolve Resolver
	// Workers deliver in parallel (default 4).
	Workers int
	// QueueSize bounds the messages waiting or in flight (default 1000).
	QueueSize int
	// Timeout bounds each delivery attempt (default 5s).
	Timeout time.Duration
	// MaxAge is how long a message is retried before it is dropped
	// (default 15m).
	MaxAge time.Duration
	// MinBackoff and MaxBackoff bound the delay between attempts of one
	// message, doubling from the first (defaults 1s and 1m).
	MinBackoff, MaxBackoff time.Duration
	// ConfigTTL is how long a namespace's resolved webhook is reused
	// (default 30s): a changed ConfigMap or Secret applies after it.
	ConfigTTL time.Duration
	// Allow lists the internal destinations receivers may use
	// (--notify-allow-destinations); every other address that is not public
	// unicast is refused when dialled. The zero value allows none.
	Allow AllowList
	// Recorder, when set, receives a Warning event about the ConfigMap for
	// each attempt refused because of its configuration or destination.
	Recorder events.EventRecorder
	// Outbox, when set, keeps the queue in the API server; nil keeps it in
	// memory only (a restart loses it).
	Outbox *Outbox
}

// Notifier queues and delivers events. Start runs its workers.
type Notifier struct {
	o    Options
	http *http.Client
	wake chan struct{}

	mu     sync.Mutex
	queue  []*entry // in enqueue order
	config map[string]resolved
	box    *outboxState // nil: in memory only
}

type entry struct {
	ns        string
	id        string
	body      []byte
	enqueued  time.Time
	attempts  int
	notBefore time.Time
	inFlight  bool

	// The entry in the outbox (outbox.go): its data key and segment (-1:
	// not assigned yet), the bytes it takes there, and whether it is written
	// (only then is it sent), being written, or gone from the queue while
	// being written.
	key                      string
	seg, size                int
	persisted, writing, gone bool
}

type resolved struct {
	ep  Endpoint
	ok  bool
	at  time.Time
	err error
}

// New returns a Notifier; call Start to deliver.
func New(o Options) *Notifier {
	if o.Workers <= 0 {
		o.Workers = 4
	}
	if o.QueueSize <= 0 {
		o.QueueSize = 1000
	}
	if o.Timeout <= 0 {
		o.Timeout = 5 * time.Second
	}
	if o.MaxAge <= 0 {
		o.MaxAge = 15 * time.Minute
	}
	if o.MinBackoff <= 0 {
		o.MinBackoff = time.Second
	}
	if o.MaxBackoff < o.MinBackoff {
		o.MaxBackoff = max(o.MinBackoff, time.Minute)
	}
	if o.ConfigTTL <= 0 {
		o.ConfigTTL = 30 * time.Second
	}
	metrics.RegisterNotify()
	n := &Notifier{o: o, http: newHTTPClient(o.Allow), wake: make(chan struct{}, 1), config: map[string]resolved{}}
	if o.Outbox != nil {
		n.box = newOutboxState(*o.Outbox)
	}
	return n
}

// Enqueue queues e for delivery and returns at once. Nothing is queued for a
// namespace known to have no webhook.
func (n *Notifier) Enqueue(e Event) {
	body, err := json.Marshal(cloudEvent{
		SpecVersion: "1.0", ID: e.ID, Source: e.Source, Type: e.Type, Subject: e.Subject,
		Time: e.Time.UTC(), DataContentType: "application/json", Data: e.Data,
	})
	if err != nil {
		// Data is a struct of strings and numbers; this cannot happen, and
		// must not fail the reconcile that enqueued it if it did.
		metrics.NotifyDropped.WithLabelValues("invalid").Inc()
		return
	}
	now := time.Now()
	n.mu.Lock()
	if c, known := n.config[e.Namespace]; known && !c.ok && c.err == nil && now.Sub(c.at) < n.o.ConfigTTL {
		n.mu.Unlock()
		return
	}
	if len(n.queue) >= n.o.QueueSize {
		n.dropOldestLocked()
	}
	if len(n.queue) < n.o.QueueSize {
		q := &entry{ns: e.Namespace, id: e.ID, body: body, enqueued: now, key: newKey(now)}
		n.queue = append(n.queue, q)
		n.trackLocked(q)
	} else {
		// Every entry is in flight (a queue smaller than the workers).
		metrics.NotifyDropped.WithLabelValues("queue_full").Inc()
	}
	metrics.NotifyQueueDepth.Set(float64(len(n.queue)))
	n.mu.Unlock()
	n.signal()
}

// dropOldestLocked drops the oldest entry that is not in flight; false when
// every entry is.
func (n *Notifier) dropOldestLocked() bool {
	for i, e := range n.queue {
		if !e.inFlight {
			n.queue = append(n.queue[:i], n.queue[i+1:]...)
			n.untrackLocked(e)
			metrics.NotifyDropped.WithLabelValues("queue_full").Inc()
			return true
		}
	}
	return false
}

func (n *Notifier) signal() {
	select {
	case n.wake <- struct{}{}:
	default:
	}
}

// Len is the number of messages waiting or in flight.
func (n *Notifier) Len() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.queue)
}

// Start runs the workers, and the outbox's reader and writer, until ctx
// ends (manager.Runnable). It needs leader election (the default of a
// Runnable), so only the leader delivers and writes the outbox.
func (n *Notifier) Start(ctx context.Context) error {
	var wg sync.WaitGroup
	if n.box != nil {
		wg.Go(func() { n.runOutbox(ctx) })
	}
	for range n.o.Workers {
		wg.Go(func() { n.work(ctx) })
	}
	wg.Wait()
	return nil
}

func (n *Notifier) work(ctx context.Context) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		e, wait := n.next(time.Now())
		if e != nil {
			// Another worker may find the next namespace's message.
			n.signal()
			n.deliver(ctx, e)
			n.signal()
			continue
		}
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			return
		case <-n.wake:
		case <-timer.C:
		}
	}
}

// next takes the first message that can go now: the oldest of its namespace,
// written to the outbox, with no message of that namespace in flight and its
// backoff passed. If there is none it returns how long to wait for one (the
// outbox's writer wakes the workers when it wrote).
func (n *Notifier) next(now time.Time) (*entry, time.Duration) {
	n.mu.Lock()
	defer n.mu.Unlock()
	wait := time.Hour
	head := map[string]bool{}
	for _, e := range n.queue {
		if head[e.ns] {
			continue
		}
		head[e.ns] = true
		switch {
		case e.inFlight, !e.persisted:
		case e.notBefore.After(now):
			wait = min(wait, e.notBefore.Sub(now))
		default:
			e.inFlight = true
			return e, 0
		}
	}
	return nil, wait
}

// deliver makes one attempt and removes the message on success, when its
// namespace has no webhook, or when it is too old; otherwise schedules the
// next attempt.
func (n *Notifier) deliver(ctx context.Context, e *entry) {
	ep, ok, err := n.endpoint(ctx, e.ns)
	switch {
	case err == nil && !ok:
		n.finish(e, false)
		return
	case err == nil:
		err = n.post(ctx, ep, e)
		if err == nil {
			metrics.NotifySent.WithLabelValues(e.ns).Inc()
			n.finish(e, false)
			return
		}
	default:
		metrics.NotifyFailed.WithLabelValues(e.ns, "config").Inc()
		var ce *ConfigError
		if errors.As(err, &ce) {
			n.warn(ce.Object, ce.Reason, ce.Message)
		}
	}
	if ctx.Err() != nil {
		// Shutting down: the message stays in the outbox (without one, it
		// is lost with the queue).
		return
	}
	now := time.Now()
	if now.Sub(e.enqueued) >= n.o.MaxAge {
		log.FromContext(ctx).Error(err, "Dropped a notification retried past its maximum age", "namespace", e.ns, "id", e.id, "attempts", e.attempts+1)
		metrics.NotifyDropped.WithLabelValues("expired").Inc()
		n.finish(e, false)
		return
	}
	log.FromContext(ctx).V(1).Info("Failed to deliver a notification; retrying", "namespace", e.ns, "id", e.id, "attempt", e.attempts+1, "error", err.Error())
	n.finish(e, true)
}

// finish removes e from the queue, or with retry keeps it for its next attempt.
func (n *Notifier) finish(e *entry, retry bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	e.inFlight = false
	if retry {
		e.attempts++
		e.notBefore = time.Now().Add(n.backoff(e.attempts))
		return
	}
	for i, q := range n.queue {
		if q == e {
			n.queue = append(n.queue[:i], n.queue[i+1:]...)
			n.untrackLocked(e)
			break
		}
	}
	metrics.NotifyQueueDepth.Set(float64(len(n.queue)))
}

// backoff is the delay before attempt number attempts+1.
func (n *Notifier) backoff(attempts int) time.Duration {
	d := n.o.MinBackoff
	for i := 1; i < attempts && d < n.o.MaxBackoff; i++ {
		d *= 2
	}
	return min(d, n.o.MaxBackoff)
}

// knownLocked returns the namespace's resolved webhook when it was resolved
// without error within ConfigTTL.
func (n *Notifier) knownLocked(ns string, now time.Time) (resolved, bool) {
	c, known := n.config[ns]
	return c, known && c.err == nil && now.Sub(c.at) < n.o.ConfigTTL
}

// endpoint resolves a namespace's webhook, reusing an answer for ConfigTTL.
func (n *Notifier) endpoint(ctx context.Context, ns string) (Endpoint, bool, error) {
	now := time.Now()
	n.mu.Lock()
	c, known := n.config[ns]
	n.mu.Unlock()
	if known && c.err == nil && now.Sub(c.at) < n.o.ConfigTTL {
		return c.ep, c.ok, nil
	}
	rctx, cancel := context.WithTimeout(ctx, n.o.Timeout)
	defer cancel()
	ep, ok, err := n.o.Resolve(rctx, ns)
	n.mu.Lock()
	n.config[ns] = resolved{ep: ep, ok: ok, at: now, err: err}
	n.mu.Unlock()
	return ep, ok, err
}

// post sends one attempt, bounded by the request timeout.
func (n *Notifier) post(ctx context.Context, ep Endpoint, e *entry) error {
	ctx, cancel := context.WithTimeout(ctx, n.o.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, ep.URL, bytes.NewReader(e.body))
	if err != nil {
		metrics.NotifyFailed.WithLabelValues(e.ns, "config").Inc()
		return fmt.Errorf("build request: %w", err)
	}
	skey, err := StandardKey(ep.Key)
	if err != nil {
		// The resolver refuses such a key; a Resolver of a test may not.
		metrics.NotifyFailed.WithLabelValues(e.ns, "config").Inc()
		return errors.New("secretKey: not a usable Standard Webhooks secret")
	}
	ts := strconv.FormatInt(time.Now().Unix(), 10)
	req.Header.Set("Content-Type", ContentType)
	req.Header.Set(HeaderWebhookID, e.id)
	req.Header.Set(HeaderWebhookTimestamp, ts)
	req.Header.Set(HeaderWebhookSignature, SignStandard(skey, e.id, ts, e.body))
	req.Header.Set(HeaderTimestamp, ts)
	req.Header.Set(HeaderSignature, Sign(ep.Key, ts, e.body))
	resp, err := n.http.Do(req)
	if r := refused(err); r != nil {
		metrics.NotifyFailed.WithLabelValues(e.ns, "refused").Inc()
		msg := fmt.Sprintf("url: did not connect to the receiver %s: %s", receiverOf(ep.URL), r)
		n.warn(ep.Source, ReasonDestinationRefused, msg)
		return errors.New(msg)
	}
	if err != nil {
		reason := "connection"
		var ne net.Error
		if errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()) {
			reason = "timeout"
		}
		metrics.NotifyFailed.WithLabelValues(e.ns, reason).Inc()
		// The URL may carry a token in its query: report only the kind of error.
		return fmt.Errorf("post notification: %s", reason)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	_ = resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		metrics.NotifyFailed.WithLabelValues(e.ns, "status").Inc()
		return fmt.Errorf("post notification: receiver answered %d", resp.StatusCode)
	}
	return nil
}

// warn reports a refused attempt as a Warning event about obj. Messages name
// the ConfigMap's key and never carry the signing key or the URL's path and
// query (which may hold a token); the event recorder counts repeats of one
// message instead of writing one event per retry.
func (n *Notifier) warn(obj runtime.Object, reason, msg string) {
	if n.o.Recorder == nil || obj == nil {
		return
	}
	n.o.Recorder.Eventf(obj, nil, corev1.EventTypeWarning, reason, "Notify", "%s", msg)
}

// receiverOf is the scheme and host of a receiver's URL: enough to recognise
// it, without the path or query that may carry a token.
func receiverOf(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Scheme + "://" + u.Host
}
