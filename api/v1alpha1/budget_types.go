package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// SandboxQuota budget condition types, reasons and events.
const (
	// ConditionBudgetWarning is True on a SandboxQuota while some budget
	// has spent its spec.budgets[].warnAtPercent, or is projected to reach
	// its limit before its window ends.
	ConditionBudgetWarning = "BudgetWarning"
	// ConditionBudgetExceeded is True on a SandboxQuota while some budget
	// refuses new session starts or stops running Sandboxes: it reached its
	// limit, or would before the next count at the current burn rate.
	ConditionBudgetExceeded = "BudgetExceeded"
	// ReasonOverBudget is set on BudgetWarning=True and BudgetExceeded=True,
	// and on Ready=False of a Sandbox whose start a budget refuses (with
	// reason QuotaExceeded there: it waits the same way).
	ReasonOverBudget = "OverBudget"
	// ReasonWithinBudget is set on BudgetWarning=False and
	// BudgetExceeded=False.
	ReasonWithinBudget = "WithinBudget"
	// ReasonBudgetStopped is the event on a Sandbox whose session a budget
	// with enforcement Stop stopped (its spec.state set to Stopped).
	ReasonBudgetStopped = "BudgetStopped"
)

// BudgetUnit is what a budget's limit counts.
// +kubebuilder:validation:Enum=Money;ActiveCPUHours;MemoryGBHours;TransferGB;Creations
type BudgetUnit string

const (
	// BudgetMoney counts money: usage priced with the class of each object
	// (the manager's default prices for objects of no class).
	BudgetMoney BudgetUnit = "Money"
	// BudgetActiveCPUHours counts hours of active CPU time.
	BudgetActiveCPUHours BudgetUnit = "ActiveCPUHours"
	// BudgetMemoryGBHours counts GB (1024 MB) of provisioned memory × hours.
	BudgetMemoryGBHours BudgetUnit = "MemoryGBHours"
	// BudgetTransferGB counts GB (10^9 bytes) transferred, both directions.
	BudgetTransferGB BudgetUnit = "TransferGB"
	// BudgetCreations counts session starts (creates and resumes).
	BudgetCreations BudgetUnit = "Creations"
)

// BudgetEnforcement is what a budget does at its limit.
// +kubebuilder:validation:Enum=Warn;Refuse;Stop
type BudgetEnforcement string

const (
	// BudgetWarnOnly only warns (condition, event, webhook notification).
	BudgetWarnOnly BudgetEnforcement = "Warn"
	// BudgetRefuse also refuses new session starts (creates and resumes)
	// of the namespace: they wait with reason QuotaExceeded.
	BudgetRefuse BudgetEnforcement = "Refuse"
	// BudgetStop also stops the running Sandboxes of the namespace (sets
	// their spec.state to Stopped): opt-in, for a hard limit.
	BudgetStop BudgetEnforcement = "Stop"
)

// BudgetProjection is how far ahead the enforcement of a budget looks.
// +kubebuilder:validation:Enum=None;NextCount;WindowEnd
type BudgetProjection string

const (
	// BudgetProjectNone enforces only once the limit is reached.
	BudgetProjectNone BudgetProjection = "None"
	// BudgetProjectNextCount enforces once the current burn rate would reach
	// the limit before the next count (one poll interval): the overshoot
	// past the limit stays under one interval's burn.
	BudgetProjectNextCount BudgetProjection = "NextCount"
	// BudgetProjectWindowEnd enforces once the current burn rate would
	// reach the limit before the window ends.
	BudgetProjectWindowEnd BudgetProjection = "WindowEnd"
)

// BudgetAction is what a budget does now.
// +kubebuilder:validation:Enum=None;Warn;Refuse;Stop
type BudgetAction string

// The actions a budget can have in force, in increasing severity: each
// includes the ones before it.
const (
	BudgetActionNone   BudgetAction = "None"
	BudgetActionWarn   BudgetAction = "Warn"
	BudgetActionRefuse BudgetAction = "Refuse"
	BudgetActionStop   BudgetAction = "Stop"
)

// CalendarMonthWindow is a calendar month in a time zone.
type CalendarMonthWindow struct {
	// timeZone is the IANA name of the time zone the month starts in
	// ("Europe/Vienna"); UTC when unset.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	TimeZone string `json:"timeZone,omitempty"`
}

// BudgetWindow is the time a budget counts over. Exactly one of its fields
// is set.
// +kubebuilder:validation:XValidation:rule="has(self.rollingSeconds) != has(self.calendarMonth)",message="spec.budgets[].window must set exactly one of rollingSeconds and calendarMonth"
type BudgetWindow struct {
	// rollingSeconds makes the window the last so many seconds (one hour to
	// 31 days), counted in 24 slices: usage leaves it slice by slice.
	// +optional
	// +kubebuilder:validation:Minimum=3600
	// +kubebuilder:validation:Maximum=2678400
	RollingSeconds *int64 `json:"rollingSeconds,omitempty"`
	// calendarMonth makes the window the current calendar month; what was
	// spent resets when the next one starts.
	// +optional
	CalendarMonth *CalendarMonthWindow `json:"calendarMonth,omitempty"`
}

// SandboxBudget is a limit on what a namespace spends over a window, and
// what happens as it is approached.
type SandboxBudget struct {
	// name of the budget, unique in the quota; it names the budget in
	// status, events and metrics.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name"`
	// window the budget counts over.
	// +required
	Window BudgetWindow `json:"window"`
	// unit of limit; Money when unset (in the currency of the prices).
	// +optional
	// +kubebuilder:default=Money
	Unit BudgetUnit `json:"unit,omitempty"`
	// limit is the most the namespace may spend in a window, in unit: a
	// decimal string ("500", "12.50").
	// +required
	Limit Decimal `json:"limit"`
	// warnAtPercent of limit spent sets BudgetWarning=True, records a
	// BudgetWarning event and sends a webhook notification; unset, it warns
	// only when the limit is reached or projected to be reached by the end
	// of the window.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	WarnAtPercent *int32 `json:"warnAtPercent,omitempty"`
	// enforcement at the limit: Warn, Refuse (new session starts wait) or
	// Stop (running Sandboxes are stopped too). Refuse when unset.
	// +optional
	// +kubebuilder:default=Refuse
	Enforcement BudgetEnforcement `json:"enforcement,omitempty"`
	// projection is how far ahead enforcement looks at the current burn
	// rate: None, NextCount (the default: act before the next count would
	// find the limit crossed) or WindowEnd.
	// +optional
	// +kubebuilder:default=NextCount
	Projection BudgetProjection `json:"projection,omitempty"`
}

// BudgetSlice is what was spent from start until the next slice's start.
type BudgetSlice struct {
	// start of the slice.
	// +required
	Start metav1.Time `json:"start"`
	// spent in the slice, in the budget's unit.
	// +required
	Spent Decimal `json:"spent"`
}

// SandboxBudgetStatus is where a budget stands.
type SandboxBudgetStatus struct {
	// name of the budget in spec.budgets.
	// +required
	// +kubebuilder:validation:MaxLength=63
	Name string `json:"name"`
	// unit of the amounts below (Money: in currency).
	// +optional
	Unit BudgetUnit `json:"unit,omitempty"`
	// currency of a Money budget's amounts.
	// +optional
	// +kubebuilder:validation:MaxLength=3
	Currency string `json:"currency,omitempty"`
	// windowStart is when the current window began (for a rolling window,
	// the start of its oldest slice).
	// +optional
	WindowStart *metav1.Time `json:"windowStart,omitempty"`
	// windowEnd is when the current calendar month ends; unset for a
	// rolling window.
	// +optional
	WindowEnd *metav1.Time `json:"windowEnd,omitempty"`
	// spent in the window so far.
	// +optional
	Spent Decimal `json:"spent,omitempty"`
	// burnPerHour is the rate of spending, measured over the last stretch
	// of at least one count interval that ended.
	// +optional
	BurnPerHour Decimal `json:"burnPerHour,omitempty"`
	// burnSince starts the stretch being measured now, and burnSpent is
	// what was spent in it so far: the rate is measured over whole stretches,
	// so that a count triggered right after another does not read as a
	// change of rate.
	// +optional
	BurnSince *metav1.MicroTime `json:"burnSince,omitempty"`
	// burnSpent is what was spent since burnSince.
	// +optional
	BurnSpent Decimal `json:"burnSpent,omitempty"`
	// projected is spent plus burnPerHour until the window ends (a rolling
	// window: one window ahead).
	// +optional
	Projected Decimal `json:"projected,omitempty"`
	// percent of the limit spent, rounded down.
	// +optional
	Percent int32 `json:"percent,omitempty"`
	// action in force: None, Warn, Refuse (new session starts wait) or Stop.
	// +optional
	Action BudgetAction `json:"action,omitempty"`
	// message says why the action is in force.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Message string `json:"message,omitempty"`
	// countedAt is the last count, to the microsecond: the burn rate
	// divides by the time between two counts, which are seconds apart.
	// +optional
	CountedAt *metav1.MicroTime `json:"countedAt,omitempty"`
	// counted is the lifetime amount of the namespace's objects at
	// countedAt, in the budget's unit: after a manager restart, what they
	// add beyond it is what they spent meanwhile.
	// +optional
	Counted Decimal `json:"counted,omitempty"`
	// slices of the window, oldest first (24 for a rolling window, one for a
	// calendar month).
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=25
	Slices []BudgetSlice `json:"slices,omitempty"`
}
