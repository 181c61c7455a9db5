package sandboxclient

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
)

// DefaultHeartbeatInterval is the Heartbeater's interval when none is given.
// Keep the interval well under the Sandbox's spec.timeoutSeconds.
const DefaultHeartbeatInterval = 30 * time.Second

// heartbeatTimeout bounds one heartbeat patch sent in the background.
const heartbeatTimeout = 30 * time.Second

func formatActivity(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// Heartbeat records activity at the given time on a Sandbox: one JSON merge
// patch of the sandbox.sentry.io/last-activity annotation. The controller
// keeps the session running until spec.timeoutSeconds after it, and a
// heartbeat newer than the stop wakes an Idle Sandbox. Use a Heartbeater for
// activity that happens often.
func (c *Client) Heartbeat(ctx context.Context, namespace, name string, at time.Time) error {
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{
		"annotations": map[string]string{sandboxv1.AnnotationLastActivity: formatActivity(at)},
	}})
	if _, err := c.sandboxes(namespace).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("heartbeat Sandbox %s/%s: %w", namespace, name, err)
	}
	return nil
}

// Heartbeater coalesces activity into heartbeats: Beat is cheap and never
// blocks, and at most one patch per interval goes to the API server,
// carrying the time of the latest Beat. The first Beat after a quiet interval
// is sent at once (it may wake an Idle Sandbox); the Beats after it wait for
// the interval to end and are sent as one.
type Heartbeater struct {
	c               *Client
	namespace, name string
	interval        time.Duration

	kick   chan struct{} // a Beat is pending; capacity 1
	stop   chan struct{}
	done   chan struct{}
	cancel context.CancelFunc
	once   sync.Once

	mu      sync.Mutex
	pending time.Time // latest Beat not sent yet; zero when none
	err     error     // result of the last patch
}

// StartHeartbeat starts a Heartbeater for a Sandbox; interval 0 means
// DefaultHeartbeatInterval. Stop it when the work ends.
func (c *Client) StartHeartbeat(namespace, name string, interval time.Duration) *Heartbeater {
	if interval <= 0 {
		interval = DefaultHeartbeatInterval
	}
	ctx, cancel := context.WithCancel(context.Background())
	h := &Heartbeater{
		c: c, namespace: namespace, name: name, interval: interval,
		kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{}), cancel: cancel,
	}
	go h.loop(ctx)
	return h
}

// Beat records activity now.
func (h *Heartbeater) Beat() {
	h.mu.Lock()
	h.pending = time.Now()
	h.mu.Unlock()
	select {
	case h.kick <- struct{}{}:
	default:
	}
}

// Err is the error of the last heartbeat sent (nil once one succeeds again).
func (h *Heartbeater) Err() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.err
}

// Stop ends the Heartbeater, sends the Beat still pending (if any) with ctx,
// and returns the error of the last heartbeat.
func (h *Heartbeater) Stop(ctx context.Context) error {
	h.once.Do(func() { close(h.stop) })
	select {
	case <-h.done:
	case <-ctx.Done():
		h.cancel() // abandon a patch in flight
		<-h.done
	}
	h.cancel()
	h.send(ctx)
	return h.Err()
}

func (h *Heartbeater) loop(ctx context.Context) {
	defer close(h.done)
	for {
		select {
		case <-h.kick:
		case <-h.stop:
			return
		}
		sendCtx, cancel := context.WithTimeout(ctx, heartbeatTimeout)
		h.send(sendCtx)
		cancel()
		// Beats during the interval stay pending and go out together.
		t := time.NewTimer(h.interval)
		select {
		case <-t.C:
		case <-h.stop:
			t.Stop()
			return
		}
	}
}

// send patches the pending Beat, if any.
func (h *Heartbeater) send(ctx context.Context) {
	h.mu.Lock()
	at := h.pending
	h.pending = time.Time{}
	h.mu.Unlock()
	if at.IsZero() {
		return
	}
	err := h.c.Heartbeat(ctx, h.namespace, h.name, at)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.err = err
	if err != nil && h.pending.IsZero() {
		// Try again after the interval, unless a newer Beat comes first.
		h.pending = at
		select {
		case h.kick <- struct{}{}:
		default:
		}
	}
}
