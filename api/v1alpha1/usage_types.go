package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// UsageAmounts are the billable quantities Vercel reports for sandbox
// sessions, in the units Vercel bills (docs/dev/vercel-sandbox-api.md §3.1,
// §3.2). Integers with the unit in the name, so sums never lose precision.
type UsageAmounts struct {
	// activeCPUMillis is the CPU time the session's processes actually used,
	// in milliseconds (Vercel's activeCpuDurationMs): a sleeping command
	// adds nothing. Vercel reports it when a session stops, so it does not
	// grow while a session runs.
	// +optional
	// +kubebuilder:validation:Minimum=0
	ActiveCPUMillis int64 `json:"activeCPUMillis,omitempty"`
	// sessionMillis is the wall-clock time sessions ran, in milliseconds
	// (Vercel's duration).
	// +optional
	// +kubebuilder:validation:Minimum=0
	SessionMillis int64 `json:"sessionMillis,omitempty"`
	// memoryMBMillis is provisioned memory multiplied by the time it was
	// provisioned, in megabyte-milliseconds (a 4096 MB session running one
	// second adds 4096000). Divide by 3.6e9 × 1024 for GB-hours.
	// +optional
	// +kubebuilder:validation:Minimum=0
	MemoryMBMillis int64 `json:"memoryMBMillis,omitempty"`
	// egressBytes is the network traffic sent out of the sandbox, in bytes.
	// Vercel reports it when a session stops.
	// +optional
	// +kubebuilder:validation:Minimum=0
	EgressBytes int64 `json:"egressBytes,omitempty"`
	// ingressBytes is the network traffic received by the sandbox, in bytes.
	// Vercel reports it when a session stops.
	// +optional
	// +kubebuilder:validation:Minimum=0
	IngressBytes int64 `json:"ingressBytes,omitempty"`
}

// SessionUsage is the usage of one Vercel session.
type SessionUsage struct {
	// sessionID is the Vercel session (sbx_…) these figures are about.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	SessionID string `json:"sessionID,omitempty"`

	UsageAmounts `json:",inline"`

	// endedAt is set once the session stopped and Vercel reported its final
	// figures. Until then the figures are zero: Vercel reports a session's
	// usage when it stops, and the controller does not rewrite status on
	// every poll. A running session has run since status.startedAt, on
	// status.sessionVCPUs vCPUs with 2048 MB of memory each.
	// +optional
	EndedAt *metav1.Time `json:"endedAt,omitempty"`
}

// UsageAccounting is the controller's record of what is already counted in
// usage.total, so that every session is counted exactly once across polls,
// manager restarts and recreations: the status is the memory, and reading the
// same Vercel answer twice changes nothing.
type UsageAccounting struct {
	// vercelName is the Vercel sandbox whose cumulative figures are in
	// counted.
	// +optional
	// +kubebuilder:validation:MaxLength=128
	VercelName string `json:"vercelName,omitempty"`
	// counted are the cumulative figures of the Vercel sandbox vercelName
	// over its finished sessions, as last read (Vercel's totalActiveCpuDurationMs,
	// totalDurationMs, totalEgressBytes, totalIngressBytes; memory from each
	// session's provisioned memory over the growth of its duration).
	// +optional
	Counted *UsageAmounts `json:"counted,omitempty"`
	// countedSessionID is the last session whose final figures are in
	// counted.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	CountedSessionID string `json:"countedSessionID,omitempty"`
	// retired is the usage of the Vercel sandboxes this object had before
	// vercelName (recreations), added once when the name changed.
	// +optional
	Retired *UsageAmounts `json:"retired,omitempty"`
	// snapshotID is the Vercel snapshot whose size is in snapshotBytes.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	SnapshotID string `json:"snapshotID,omitempty"`
}

// SandboxUsage is what an object used on Vercel, as the controller observed it
// on the polls it makes anyway (no extra requests). The same type serves
// Sandbox, SandboxSnapshot and SandboxFork, so prices and budgets read one
// shape; each kind's status field says which parts it fills.
type SandboxUsage struct {
	// current is the usage of the current session, or of the last one while
	// none runs.
	// +optional
	Current *SessionUsage `json:"current,omitempty"`
	// total is the usage over the object's whole life: every finished
	// session, across pauses, resumes and recreations of the Vercel
	// sandbox. A running session joins it when it ends.
	// +optional
	Total *UsageAmounts `json:"total,omitempty"`
	// snapshotBytes is the storage, in bytes, of the Vercel snapshots this
	// object holds (the snapshot the next session resumes from, or the
	// snapshot a SandboxSnapshot names), where Vercel reported the size.
	// +optional
	// +kubebuilder:validation:Minimum=0
	SnapshotBytes int64 `json:"snapshotBytes,omitempty"`
	// observedAt is when these figures last changed, from a Vercel answer.
	// +optional
	ObservedAt *metav1.Time `json:"observedAt,omitempty"`
	// accounting records what total already counts (the controller's
	// bookkeeping; users read current and total).
	// +optional
	Accounting *UsageAccounting `json:"accounting,omitempty"`
}
