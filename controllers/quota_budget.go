package controllers

// Budgets of a SandboxQuota: the pure decision. From one observation — what
// the namespace spent since the last count, in the budget's unit — and the
// budget's previous status, decide the window, what was spent in it, the
// burn rate, the projection and the action in force. Acting on it (refusing
// starts, stopping Sandboxes, events, notifications) is in
// quota_budget_act.go; counting what was spent is in quota_budget_count.go.

import (
	"fmt"
	"math/big"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
	"github.com/getsentry/sandbox-controller/internal/cost"
)

// rollingSlices is how many slices a rolling window is counted in: usage
// leaves the window one slice at a time, and status stays small.
const rollingSlices = 24

// budgetInput is one observation of a budget.
type budgetInput struct {
	budget sandboxv1.SandboxBudget
	prev   *sandboxv1.SandboxBudgetStatus
	// spent is what the namespace spent since prev.countedAt, in the
	// budget's unit (0 on the budget's first count: it counts from then).
	spent *big.Rat
	// counted is the namespace's lifetime amount now (status.counted).
	counted  *big.Rat
	currency string
	now      time.Time
	// poll is the time to the next count (the count interval).
	poll time.Duration
}

// decideBudget is the budget's status after in.
func decideBudget(in budgetInput) (sandboxv1.SandboxBudgetStatus, error) {
	b := in.budget
	limit, err := cost.Parse(b.Limit)
	if err != nil {
		return sandboxv1.SandboxBudgetStatus{}, fmt.Errorf("spec.budgets[%s].limit: %w", b.Name, err)
	}
	start, end, width, err := budgetWindow(b.Window, in.now)
	if err != nil {
		return sandboxv1.SandboxBudgetStatus{}, err
	}
	var prevSlices []sandboxv1.BudgetSlice
	if in.prev != nil && in.prev.Unit == unitOf(b) {
		prevSlices = in.prev.Slices
	}
	slices, err := addToSlices(prevSlices, in.spent, start, width, in.now, b.Window.CalendarMonth != nil)
	if err != nil {
		return sandboxv1.SandboxBudgetStatus{}, err
	}
	spent, err := sumSlices(slices)
	if err != nil {
		return sandboxv1.SandboxBudgetStatus{}, err
	}
	burn, burnSince, burnSpent := burnRate(in)
	remaining := end.Sub(in.now)
	projected := new(big.Rat).Add(spent, hoursOf(burn, remaining))
	nextCount := new(big.Rat).Add(spent, hoursOf(burn, countHorizon(in)))
	st := sandboxv1.SandboxBudgetStatus{
		Name: b.Name, Unit: unitOf(b), Currency: in.currency,
		WindowStart: &metav1.Time{Time: start}, Spent: cost.Format(spent), BurnPerHour: cost.Format(burn),
		Projected: cost.Format(projected), Percent: percentOf(spent, limit),
		CountedAt: &metav1.MicroTime{Time: in.now}, Counted: cost.Format(in.counted), Slices: slices,
		BurnSince: &metav1.MicroTime{Time: burnSince}, BurnSpent: cost.Format(burnSpent),
	}
	if b.Window.CalendarMonth != nil {
		st.WindowEnd = &metav1.Time{Time: end}
	} else {
		st.WindowStart = &slices[0].Start
	}
	if b.Unit != sandboxv1.BudgetMoney && b.Unit != "" {
		st.Currency = ""
	}
	st.Action, st.Message = budgetAction(b, limit, spent, nextCount, projected, st.Percent)
	return st, nil
}

// budgetAction is the action a budget takes and why, in words.
func budgetAction(b sandboxv1.SandboxBudget, limit, spent, nextCount, projected *big.Rat, percent int32) (sandboxv1.BudgetAction, string) {
	of := fmt.Sprintf("%s of %s %s", cost.Format(spent), b.Limit, unitOf(b))
	if a, msg := enforcement(b, limit, spent, nextCount, projected, of); a != "" {
		return a, msg
	}
	switch {
	case spent.Cmp(limit) >= 0:
		return sandboxv1.BudgetActionWarn, fmt.Sprintf("Spent %s: the limit is reached (enforcement Warn)", of)
	case b.WarnAtPercent != nil && percent >= *b.WarnAtPercent:
		return sandboxv1.BudgetActionWarn, fmt.Sprintf("Spent %s: %d %% (warning at %d %%)", of, percent, *b.WarnAtPercent)
	case projected.Cmp(limit) >= 0:
		return sandboxv1.BudgetActionWarn, fmt.Sprintf("Spent %s: projected %s by the end of the window at the current burn rate", of, cost.Format(projected))
	}
	return sandboxv1.BudgetActionNone, fmt.Sprintf("Spent %s", of)
}

// enforcement is Refuse or Stop when b enforces now ("" when it does not):
// the amount its projection watches reached the limit.
func enforcement(b sandboxv1.SandboxBudget, limit, spent, nextCount, projected *big.Rat, of string) (sandboxv1.BudgetAction, string) {
	watched, horizon := nextCount, "next count"
	switch b.Projection {
	case sandboxv1.BudgetProjectNone:
		watched = spent
	case sandboxv1.BudgetProjectWindowEnd:
		watched, horizon = projected, "window ends"
	}
	if b.Enforcement == sandboxv1.BudgetWarnOnly || watched.Cmp(limit) < 0 {
		return "", ""
	}
	why := "the limit is reached"
	if spent.Cmp(limit) < 0 {
		why = "the current burn rate reaches the limit before the " + horizon
	}
	if b.Enforcement == sandboxv1.BudgetStop {
		return sandboxv1.BudgetActionStop, fmt.Sprintf("Spent %s: %s; running Sandboxes are stopped and new session starts wait", of, why)
	}
	return sandboxv1.BudgetActionRefuse, fmt.Sprintf("Spent %s: %s; new session starts wait", of, why)
}

// unitOf is b's unit, Money when unset.
func unitOf(b sandboxv1.SandboxBudget) sandboxv1.BudgetUnit {
	if b.Unit == "" {
		return sandboxv1.BudgetMoney
	}
	return b.Unit
}

// budgetWindow is the window containing now: its start and end, and the
// width of its slices (a calendar month is one slice).
func budgetWindow(w sandboxv1.BudgetWindow, now time.Time) (start, end time.Time, width time.Duration, err error) {
	if w.RollingSeconds != nil {
		d := time.Duration(*w.RollingSeconds) * time.Second
		width = d / rollingSlices
		return now.Add(-d), now.Add(d), width, nil
	}
	loc := time.UTC
	if w.CalendarMonth != nil && w.CalendarMonth.TimeZone != "" {
		if loc, err = time.LoadLocation(w.CalendarMonth.TimeZone); err != nil {
			return start, end, 0, fmt.Errorf("spec.budgets[].window.calendarMonth.timeZone %q is not a known time zone", w.CalendarMonth.TimeZone)
		}
	}
	t := now.In(loc)
	start = time.Date(t.Year(), t.Month(), 1, 0, 0, 0, 0, loc)
	end = start.AddDate(0, 1, 0)
	return start, end, end.Sub(start), nil
}

// addToSlices adds spent to the slice now falls in, dropping the slices
// that left the window. A rolling window's slices are aligned to multiples
// of width and leave it once they end at or before its start (so up to one
// slice older than the window still counts: the error is on the safe
// side); a month has one slice, which starts at the month's start.
func addToSlices(prev []sandboxv1.BudgetSlice, spent *big.Rat, start time.Time, width time.Duration, now time.Time, month bool) ([]sandboxv1.BudgetSlice, error) {
	cur := now.Truncate(width)
	if month {
		cur = start
	}
	var out []sandboxv1.BudgetSlice
	for _, s := range prev {
		if month && !s.Start.Time.Equal(start) || !month && !s.Start.Add(width).After(start) {
			continue
		}
		out = append(out, *s.DeepCopy())
	}
	if n := len(out); n == 0 || !out[n-1].Start.Time.Equal(cur) {
		out = append(out, sandboxv1.BudgetSlice{Start: metav1.Time{Time: cur}, Spent: "0"})
	}
	last := &out[len(out)-1]
	have, err := cost.Parse(last.Spent)
	if err != nil {
		return nil, fmt.Errorf("status.budgets[].slices[].spent: %w", err)
	}
	last.Spent = cost.Format(new(big.Rat).Add(have, spent))
	if len(out) > rollingSlices+1 {
		out = out[len(out)-rollingSlices-1:]
	}
	return out, nil
}

func sumSlices(slices []sandboxv1.BudgetSlice) (*big.Rat, error) {
	sum := new(big.Rat)
	for _, s := range slices {
		v, err := cost.Parse(s.Spent)
		if err != nil {
			return nil, fmt.Errorf("status.budgets[].slices[].spent: %w", err)
		}
		sum.Add(sum, v)
	}
	return sum, nil
}

// burnRate measures the rate of spending per hour over stretches of at
// least one count interval: what was spent since the stretch began is kept
// (burnSince, burnSpent) until the stretch is that long, and only then
// becomes the rate. Counts closer together (a reconcile triggered by
// something else) keep the last rate instead of reading a short stretch as
// a change of rate.
func burnRate(in budgetInput) (rate *big.Rat, since time.Time, acc *big.Rat) {
	rate, acc, since = new(big.Rat), new(big.Rat).Set(in.spent), in.now
	if in.prev == nil || in.prev.CountedAt == nil {
		return rate, since, new(big.Rat)
	}
	if r, err := cost.Parse(in.prev.BurnPerHour); err == nil {
		rate = r
	}
	since = in.prev.CountedAt.Time
	if in.prev.BurnSince != nil {
		since = in.prev.BurnSince.Time
		if was, err := cost.Parse(in.prev.BurnSpent); err == nil {
			acc.Add(acc, was)
		}
	}
	span := in.now.Sub(since)
	if span < max(in.poll, time.Second) {
		return rate, since, acc
	}
	rate = new(big.Rat).Quo(new(big.Rat).Mul(acc, big.NewRat(int64(time.Hour), 1)), big.NewRat(int64(span), 1))
	return rate, in.now, new(big.Rat)
}

// countHorizon is how far ahead NextCount projects: the count interval and
// half again (a count comes a little late on a loaded manager, and the
// crossing must be seen by the count before it), or the time the last count
// took to come when it came later than that (up to two intervals, so that a
// gap after a restart does not read as the cadence).
func countHorizon(in budgetInput) time.Duration {
	h := in.poll * 3 / 2
	if in.prev != nil && in.prev.CountedAt != nil {
		if gap := in.now.Sub(in.prev.CountedAt.Time); gap > h {
			h = min(gap, 2*in.poll)
		}
	}
	return h
}

// hoursOf is rate (per hour) × d.
func hoursOf(rate *big.Rat, d time.Duration) *big.Rat {
	if d <= 0 {
		return new(big.Rat)
	}
	return new(big.Rat).Quo(new(big.Rat).Mul(rate, big.NewRat(int64(d), 1)), big.NewRat(int64(time.Hour), 1))
}

// percentOf is spent/limit in percent, rounded down; a limit of 0 is
// spent at once.
func percentOf(spent, limit *big.Rat) int32 {
	if limit.Sign() == 0 {
		return 100
	}
	p := new(big.Rat).Quo(new(big.Rat).Mul(spent, big.NewRat(100, 1)), limit)
	n := new(big.Int).Quo(p.Num(), p.Denom())
	if !n.IsInt64() || n.Int64() > 1_000_000 {
		return 1_000_000
	}
	return int32(n.Int64())
}
