package perf

import (
	"context"
	"time"
)

// runGrid measures one (N, latency) point: Rounds rounds of the three arms,
// the order rotated each round so that no arm always runs first.
func (h *harness) runGrid(ctx context.Context, n int, latency time.Duration, rounds int) (*GridResult, error) {
	h.emu.Faults().SetLatency("*", latency)
	defer h.emu.Faults().SetLatency("*", 0)
	h.logf("N=%d latency=%s: %d interleaved rounds", n, latency, rounds)
	runs := map[string][]*armRun{}
	order := []string{ArmOperator, ArmDirect, ArmFloor}
	if h.sharded != nil {
		order = append(order, ArmSharded)
	}
	for round := 0; round < rounds; round++ {
		for i := range order {
			arm := order[(i+round)%len(order)]
			// A pause refills the shared Vercel request budget (one second's
			// worth of burst) and lets the API server settle, so every arm
			// starts from the same state.
			time.Sleep(1500 * time.Millisecond)
			var r *armRun
			var err error
			switch arm {
			case ArmOperator:
				r, err = h.runCRArm(ctx, ArmOperator, n, h.operator)
			case ArmDirect:
				r, err = h.runDirect(ctx, n)
			case ArmFloor:
				r, err = h.runCRArm(ctx, ArmFloor, n, h.floor)
			case ArmSharded:
				r, err = h.runCRArm(ctx, ArmSharded, n, h.sharded)
			}
			if err != nil {
				return nil, err
			}
			h.logf("  round %d %-8s drain %7.3fs p50 %7.3fs failed %d", round+1, arm, r.drain.Seconds(), pct(r.latencies, 50).Seconds(), r.failed)
			runs[arm] = append(runs[arm], r)
		}
	}
	return summarizeGrid(n, latency, runs), nil
}
