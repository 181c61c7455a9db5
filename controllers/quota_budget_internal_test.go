package controllers

import (
	"math/big"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
)

func rat(s string) *big.Rat {
	r, ok := new(big.Rat).SetString(s)
	if !ok {
		panic(s)
	}
	return r
}

func TestDecideBudget(t *testing.T) {
	now := time.Date(2026, 12, 15, 12, 0, 0, 0, time.UTC)
	dec15 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	budget := func(mod func(*sandboxv1.SandboxBudget)) sandboxv1.SandboxBudget {
		b := sandboxv1.SandboxBudget{Name: "team", Window: sandboxv1.BudgetWindow{CalendarMonth: &sandboxv1.CalendarMonthWindow{}}, Limit: "10", WarnAtPercent: ptr.To[int32](80),
			Enforcement: sandboxv1.BudgetRefuse, Projection: sandboxv1.BudgetProjectNextCount}
		if mod != nil {
			mod(&b)
		}
		return b
	}
	// prev is a status counted a minute ago that spent spent this month.
	prev := func(spent string, at time.Time, start time.Time) *sandboxv1.SandboxBudgetStatus {
		return &sandboxv1.SandboxBudgetStatus{Name: "team", Unit: sandboxv1.BudgetMoney, CountedAt: &metav1.MicroTime{Time: at},
			Slices: []sandboxv1.BudgetSlice{{Start: metav1.Time{Time: start}, Spent: sandboxv1.Decimal(spent)}}}
	}
	for _, tc := range []struct {
		name        string
		b           sandboxv1.SandboxBudget
		prev        *sandboxv1.SandboxBudgetStatus
		spent       string
		now         time.Time
		wantAction  sandboxv1.BudgetAction
		wantSpent   sandboxv1.Decimal
		wantPercent int32
		wantMsg     string
	}{
		{"first count spends nothing yet", budget(nil), nil, "0", now, sandboxv1.BudgetActionNone, "0", 0, "Spent 0 of 10 Money"},
		{"below the warning", budget(nil), prev("5", now.Add(-time.Hour), dec15), "0.01", now, sandboxv1.BudgetActionNone, "5.01", 50, ""},
		{"warns at 80 %", budget(nil), prev("7.9", now.Add(-time.Hour), dec15), "0.1", now, sandboxv1.BudgetActionWarn, "8", 80, "80 % (warning at 80 %)"},
		{"refuses at the limit", budget(nil), prev("9.9", now.Add(-time.Hour), dec15), "0.1", now, sandboxv1.BudgetActionRefuse, "10", 100, "the limit is reached; new session starts wait"},
		{"refuses before the next count would cross it", budget(nil), prev("9", now.Add(-2*time.Minute), dec15), "0.5", now,
			sandboxv1.BudgetActionRefuse, "9.5", 95, "reaches the limit before the next count"},
		{"the same burn without projection only warns", budget(func(b *sandboxv1.SandboxBudget) { b.Projection = sandboxv1.BudgetProjectNone }),
			prev("9", now.Add(-2*time.Minute), dec15), "0.5", now, sandboxv1.BudgetActionWarn, "9.5", 95, ""},
		{"a count right after another keeps the rate measured before", budget(nil), func() *sandboxv1.SandboxBudgetStatus {
			p := prev("9", now.Add(-10*time.Second), dec15)
			p.BurnPerHour, p.BurnSince, p.BurnSpent = "30", &metav1.MicroTime{Time: now.Add(-10 * time.Second)}, "0"
			return p
		}(), "0", now, sandboxv1.BudgetActionRefuse, "9", 90, "before the next count"},
		{"a stretch shorter than the interval does not measure a rate yet", budget(nil), prev("9", now.Add(-10*time.Second), dec15), "0.5", now,
			sandboxv1.BudgetActionWarn, "9.5", 95, "warning at 80"},
		{"a late count projects over the interval the counts take", budget(nil), prev("9", now.Add(-3*time.Minute), dec15), "0.5", now,
			sandboxv1.BudgetActionRefuse, "9.5", 95, "before the next count"},
		{"a slow burn is not projected over the next count", budget(nil), prev("9", now.Add(-time.Hour), dec15), "0.5", now, sandboxv1.BudgetActionWarn, "9.5", 95, "warning at 80"},
		{"stops at a hard limit when asked to", budget(func(b *sandboxv1.SandboxBudget) { b.Enforcement = sandboxv1.BudgetStop }),
			prev("9.99", now.Add(-time.Hour), dec15), "0.02", now, sandboxv1.BudgetActionStop, "10.01", 100, "running Sandboxes are stopped"},
		{"enforcement Warn only warns past the limit", budget(func(b *sandboxv1.SandboxBudget) { b.Enforcement = sandboxv1.BudgetWarnOnly }),
			prev("12", now.Add(-time.Hour), dec15), "0", now, sandboxv1.BudgetActionWarn, "12", 120, "enforcement Warn"},
		{"projected past the limit by the month's end warns early", budget(func(b *sandboxv1.SandboxBudget) { b.WarnAtPercent = nil }),
			prev("1", now.Add(-time.Hour), dec15), "0.1", now, sandboxv1.BudgetActionWarn, "1.1", 11, "projected"},
		{"projection WindowEnd refuses on it", budget(func(b *sandboxv1.SandboxBudget) { b.Projection = sandboxv1.BudgetProjectWindowEnd }),
			prev("1", now.Add(-time.Hour), dec15), "0.1", now, sandboxv1.BudgetActionRefuse, "1.1", 11, "before the window ends"},
		{"a new month starts from zero", budget(nil), prev("10", time.Date(2026, 11, 30, 23, 59, 0, 0, time.UTC), time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)),
			"0.02", time.Date(2026, 12, 1, 0, 1, 0, 0, time.UTC), sandboxv1.BudgetActionWarn, "0.02", 0, "Spent 0.02 of 10 Money: projected"},
		{"the month is the time zone's", budget(func(b *sandboxv1.SandboxBudget) { b.Window.CalendarMonth.TimeZone = "America/New_York" }),
			prev("10", time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), time.Date(2026, 11, 1, 4, 0, 0, 0, time.UTC)),
			"0", time.Date(2026, 12, 1, 1, 0, 0, 0, time.UTC), sandboxv1.BudgetActionRefuse, "10", 100, ""},
		{"a raw unit limit", budget(func(b *sandboxv1.SandboxBudget) { b.Unit = sandboxv1.BudgetActiveCPUHours; b.Limit = "2" }),
			&sandboxv1.SandboxBudgetStatus{Name: "team", Unit: sandboxv1.BudgetActiveCPUHours, CountedAt: &metav1.MicroTime{Time: now.Add(-time.Hour)},
				Slices: []sandboxv1.BudgetSlice{{Start: metav1.Time{Time: dec15}, Spent: "1.5"}}},
			"0.5", now, sandboxv1.BudgetActionRefuse, "2", 100, "2 of 2 ActiveCPUHours"},
		{"a changed unit starts over", budget(func(b *sandboxv1.SandboxBudget) { b.Unit = sandboxv1.BudgetTransferGB }),
			prev("9.9", now.Add(-time.Hour), dec15), "0.1", now, sandboxv1.BudgetActionWarn, "0.1", 1, "projected 39.7 by the end of the window"},
		{"a zero limit refuses everything", budget(func(b *sandboxv1.SandboxBudget) { b.Limit = "0" }), nil, "0", now, sandboxv1.BudgetActionRefuse, "0", 100, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, err := decideBudget(budgetInput{budget: tc.b, prev: tc.prev, spent: rat(tc.spent), counted: rat("0"), currency: "USD", now: tc.now, poll: 2 * time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			if st.Action != tc.wantAction || st.Spent != tc.wantSpent || st.Percent != tc.wantPercent || !strings.Contains(st.Message, tc.wantMsg) {
				t.Errorf("got action %s, spent %s, %d %%, %q; want %s, %s, %d %%, containing %q",
					st.Action, st.Spent, st.Percent, st.Message, tc.wantAction, tc.wantSpent, tc.wantPercent, tc.wantMsg)
			}
		})
	}
}

func TestDecideBudgetRollingWindow(t *testing.T) {
	day := int64(24 * 3600)
	b := sandboxv1.SandboxBudget{Name: "day", Window: sandboxv1.BudgetWindow{RollingSeconds: &day}, Limit: "10",
		Enforcement: sandboxv1.BudgetRefuse, Projection: sandboxv1.BudgetProjectNone}
	t0 := time.Date(2026, 12, 15, 0, 0, 0, 0, time.UTC)
	var st *sandboxv1.SandboxBudgetStatus
	// 6 spent at t0, 3 at t0+12h: 9 within a day, then the first leaves.
	for _, step := range []struct {
		at         time.Time
		spent      string
		wantSpent  sandboxv1.Decimal
		wantAction sandboxv1.BudgetAction
	}{
		{t0, "6", "6", sandboxv1.BudgetActionNone},
		// 3 in 12 h projects 6 more by a day from now: a warning.
		{t0.Add(12 * time.Hour), "3", "9", sandboxv1.BudgetActionWarn},
		{t0.Add(20 * time.Hour), "1", "10", sandboxv1.BudgetActionRefuse},
		{t0.Add(25 * time.Hour), "0", "4", sandboxv1.BudgetActionNone},
		{t0.Add(37 * time.Hour), "0", "1", sandboxv1.BudgetActionNone},
	} {
		next, err := decideBudget(budgetInput{budget: b, prev: st, spent: rat(step.spent), counted: rat("0"), now: step.at, poll: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if next.Spent != step.wantSpent || next.Action != step.wantAction {
			t.Errorf("at %s: spent %s (%s), want %s (%s); slices %v", step.at, next.Spent, next.Action, step.wantSpent, step.wantAction, next.Slices)
		}
		if len(next.Slices) > rollingSlices+1 {
			t.Errorf("%d slices, at most %d", len(next.Slices), rollingSlices+1)
		}
		st = &next
	}
}

func TestDecideBudgetRefusesAnUnknownTimeZone(t *testing.T) {
	b := sandboxv1.SandboxBudget{Name: "m", Limit: "1", Window: sandboxv1.BudgetWindow{CalendarMonth: &sandboxv1.CalendarMonthWindow{TimeZone: "Mars/Olympus"}}}
	_, err := decideBudget(budgetInput{budget: b, spent: rat("0"), counted: rat("0"), now: time.Now()})
	if err == nil || !strings.Contains(err.Error(), "calendarMonth.timeZone") {
		t.Errorf("got %v, want an error naming the field", err)
	}
}
