package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// SandboxQuota condition types and reasons.
const (
	// ConditionExhausted is True on a SandboxQuota while some resource is
	// used up to its hard limit: what needs more of it waits.
	ConditionExhausted = "Exhausted"
	// ReasonCounted is set on a SandboxQuota's Ready=True: status.used is
	// current.
	ReasonCounted = "Counted"
	// ReasonAtLimit is set on Exhausted=True: some resource is used up to
	// its hard limit.
	ReasonAtLimit = "AtLimit"
	// ReasonWithinLimits is set on Exhausted=False.
	ReasonWithinLimits = "WithinLimits"
	// ReasonQuotaExceeded is set on Ready=False of a Sandbox that waits for
	// a SandboxQuota of its namespace to allow its session to start, and of a
	// SandboxSnapshot that waits for snapshot bytes. Nothing is sent to
	// Vercel while it waits; it starts by itself once capacity frees. A
	// SandboxPool with a member waiting so reports it on its own Ready=False.
	ReasonQuotaExceeded = "QuotaExceeded"
)

// Quota resource names: the keys of spec.hard and status.used, as they appear
// in events, conditions and the quota metrics' resource label.
const (
	QuotaSandboxes        = "sandboxes"
	QuotaRunningSandboxes = "runningSandboxes"
	QuotaRunningVCPUs     = "runningVCPUs"
	QuotaSnapshotBytes    = "snapshotBytes"
)

// SandboxQuotaResources are amounts of what a SandboxQuota limits. An unset
// field is not limited (in spec.hard) or not counted (in status).
type SandboxQuotaResources struct {
	// sandboxes is the number of Sandboxes that have a Vercel sandbox
	// (created, or being created). A Sandbox beyond it waits before its
	// Vercel sandbox is created. To refuse the Sandbox objects themselves,
	// use a ResourceQuota on count/sandboxes.sandbox.sentry.io.
	// +optional
	// +kubebuilder:validation:XValidation:rule="self >= 0",message="spec.hard.sandboxes must not be negative"
	Sandboxes *int64 `json:"sandboxes,omitempty"`
	// runningSandboxes is the number of Sandboxes whose session may run:
	// from the moment the controller lets it start until the session is
	// known to have stopped (or the Sandbox is gone).
	// +optional
	// +kubebuilder:validation:XValidation:rule="self >= 0",message="spec.hard.runningSandboxes must not be negative"
	RunningSandboxes *int64 `json:"runningSandboxes,omitempty"`
	// runningVCPUs is the sum of spec.resources.vcpus (2 when unset) over
	// the running Sandboxes.
	// +optional
	// +kubebuilder:validation:XValidation:rule="self >= 0",message="spec.hard.runningVCPUs must not be negative"
	RunningVCPUs *int64 `json:"runningVCPUs,omitempty"`
	// snapshotBytes is the sum of status.sizeBytes over the namespace's
	// SandboxSnapshots. Vercel reports a snapshot's size only after it is
	// taken, so the limit refuses new snapshots once it is reached; the
	// snapshot that crosses it is kept.
	// +optional
	// +kubebuilder:validation:XValidation:rule="self >= 0",message="spec.hard.snapshotBytes must not be negative"
	SnapshotBytes *int64 `json:"snapshotBytes,omitempty"`
}

// SandboxQuotaSpec is the desired state of a SandboxQuota.
type SandboxQuotaSpec struct {
	// hard is the limit of each resource in the namespace. Several
	// SandboxQuotas in one namespace all apply: a session starts only when
	// every one of them allows it.
	// +required
	Hard SandboxQuotaResources `json:"hard"`
	// budgets limit what the namespace spends over a window, in money or in
	// a metered unit, with a warning at a percentage and, at the limit,
	// refused session starts or stopped Sandboxes (docs/sandboxquota.md).
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=16
	Budgets []SandboxBudget `json:"budgets,omitempty"`
}

// SandboxQuotaStatus is the observed state of a SandboxQuota.
type SandboxQuotaStatus struct {
	// hard is spec.hard as last counted against.
	// +optional
	Hard *SandboxQuotaResources `json:"hard,omitempty"`
	// used is how much of each resource in spec.hard the namespace uses,
	// counted as the controllers enforce it (a Sandbox let start counts as
	// running before its session has started).
	// +optional
	Used *SandboxQuotaResources `json:"used,omitempty"`
	// observedGeneration is the spec generation status was computed for.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// budgets is where each of spec.budgets stands.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=16
	Budgets []SandboxBudgetStatus `json:"budgets,omitempty"`
	// conditions: Ready (status.used is current), Exhausted (some
	// resource is at its limit), BudgetWarning and BudgetExceeded.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=32
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// SandboxQuota limits what the Sandboxes and SandboxSnapshots of its
// namespace may use, like a ResourceQuota: the controllers check it before
// any call to Vercel that would start a session or take a snapshot, and
// what does not fit waits with Ready=False, reason QuotaExceeded.
// +genclient
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=sbxquota
// +kubebuilder:printcolumn:name="Running",type=integer,JSONPath=`.status.used.runningSandboxes`,description="Running Sandboxes"
// +kubebuilder:printcolumn:name="Max Running",type=integer,JSONPath=`.spec.hard.runningSandboxes`,description="Hard limit on running Sandboxes"
// +kubebuilder:printcolumn:name="vCPUs",type=integer,JSONPath=`.status.used.runningVCPUs`,description="vCPUs of the running Sandboxes"
// +kubebuilder:printcolumn:name="Max vCPUs",type=integer,JSONPath=`.spec.hard.runningVCPUs`,description="Hard limit on running vCPUs"
// +kubebuilder:printcolumn:name="Sandboxes",type=integer,JSONPath=`.status.used.sandboxes`,description="Sandboxes with a Vercel sandbox",priority=1
// +kubebuilder:printcolumn:name="Max Sandboxes",type=integer,JSONPath=`.spec.hard.sandboxes`,description="Hard limit on Sandboxes with a Vercel sandbox",priority=1
// +kubebuilder:printcolumn:name="Snapshot Bytes",type=integer,JSONPath=`.status.used.snapshotBytes`,description="Bytes of the namespace's snapshots",priority=1
// +kubebuilder:printcolumn:name="Max Snapshot Bytes",type=integer,JSONPath=`.spec.hard.snapshotBytes`,description="Hard limit on snapshot bytes",priority=1
// +kubebuilder:printcolumn:name="Exhausted",type=string,JSONPath=`.status.conditions[?(@.type=="Exhausted")].status`,description="Some resource is at its limit"
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type SandboxQuota struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the desired state.
	// +required
	Spec SandboxQuotaSpec `json:"spec"`
	// status is the observed state.
	// +optional
	Status SandboxQuotaStatus `json:"status,omitempty"`
}

// SandboxQuotaList is a list of SandboxQuotas.
// +kubebuilder:object:root=true
type SandboxQuotaList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []SandboxQuota `json:"items"`
}

func init() {
	objectTypes = append(objectTypes, &SandboxQuota{}, &SandboxQuotaList{})
}
