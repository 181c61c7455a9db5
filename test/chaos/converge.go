package chaos

// The settle phase: waiting for the verdict while clients keep using their
// sandboxes.

import (
	"context"
	"time"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
)

// converge waits until every target holds or Converge has passed. Clients
// keep using their running Sandboxes meanwhile: every Sandbox declared
// Running gets a heartbeat at once and then every 20 s, which also wakes
// those that idled or were stopped by a capture during the chaos.
func (h *harness) converge(ctx context.Context, w *workload) (*verdict, time.Duration, error) {
	start := time.Now()
	deadline := start.Add(h.cfg.Converge)
	var lastBeat time.Time
	var v *verdict
	for {
		if time.Since(lastBeat) >= 20*time.Second {
			h.heartbeatAll(ctx)
			lastBeat = time.Now()
		}
		cl, err := observe(ctx, h.stack.Client, h)
		if err != nil {
			return nil, 0, err
		}
		v = evaluate(cl, w.deleted, maxSessionMs(h.managerArgs))
		waited := time.Since(start)
		if v.ok() {
			h.logf("converged after %s: %d/%d objects", waited.Round(time.Second), v.converged, v.objects)
			return v, waited, nil
		}
		if time.Now().After(deadline) {
			h.logf("not converged within %s: %d/%d objects converged", h.cfg.Converge, v.converged, v.objects)
			return v, waited, nil
		}
		h.logf("converging: %d/%d objects, %d unowned Vercel sandboxes, %d unowned snapshots, %d duplicated, %d terminating, %d held by two",
			v.converged, v.objects, len(v.unownedSandboxes), len(v.unownedSnapshots), len(v.duplicates), len(v.terminating), len(v.shared))
		select {
		case <-ctx.Done():
			return nil, 0, ctx.Err()
		case <-time.After(5 * time.Second):
		}
	}
}

// heartbeatAll records client activity on every Sandbox declared Running.
func (h *harness) heartbeatAll(ctx context.Context) {
	list := &sandboxv1.SandboxList{}
	if err := h.stack.Client.List(ctx, list); err != nil {
		h.logf("heartbeats: %v", err)
		return
	}
	n := 0
	for i := range list.Items {
		s := &list.Items[i]
		if !isChaosNS(s.Namespace) || !s.DeletionTimestamp.IsZero() || s.Spec.State == sandboxv1.SandboxStateStopped {
			continue
		}
		if err := heartbeatSandbox(ctx, h.stack.Client, s); err == nil {
			n++
		}
	}
	h.logf("heartbeat on %d Sandboxes declared Running", n)
}
