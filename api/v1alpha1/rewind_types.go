package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Rewind reasons and event reasons (docs/decisions/0006-rewind.md).
const (
	// ReasonRewindFailed is set on Ready=False while spec.rewind names a
	// snapshot the sandbox cannot rewind to: a SandboxSnapshot that does not
	// exist or failed, a Vercel snapshot that does not exist in the project,
	// was deleted or expired, or was taken of another Vercel sandbox. The
	// sandbox is left as it was; a new spec.rewind.token tries again.
	ReasonRewindFailed = "RewindFailed"
	// ReasonRewindWaiting is set on Ready=False while spec.rewind.snapshotRef
	// names a SandboxSnapshot that is not ready to use yet; the rewind waits
	// for it and the sandbox is left as it is meanwhile.
	ReasonRewindWaiting = "RewindWaiting"
	// EventRewinding is the event reason when the controller starts a
	// rewind: the intent is recorded in status.rewind, next comes the PATCH
	// of the Vercel sandbox's currentSnapshotId.
	EventRewinding = "Rewinding"
	// EventRewound is the event reason when Vercel has the rewind: the next
	// session starts from the chosen snapshot.
	EventRewound = "Rewound"
)

// SandboxRewind asks for the filesystem of a persistent Sandbox to go back to
// an earlier snapshot: a running session is stopped (as a pause, which takes a
// snapshot of it), the Vercel sandbox's currentSnapshotId is set to the
// chosen snapshot, and a new session resumes from it when spec.state is
// Running and the session was running. Each token is applied once
// (status.rewind records it); a new token rewinds again, also to the same
// snapshot.
// +kubebuilder:validation:XValidation:rule="has(self.snapshotRef) != has(self.snapshotID)",message="spec.rewind: exactly one of snapshotRef or snapshotID must be set"
// +kubebuilder:validation:XValidation:rule="self.token != oldSelf.token || self == oldSelf",message="spec.rewind: another snapshot needs a new spec.rewind.token (a token is applied once)"
type SandboxRewind struct {
	// token identifies this rewind request. The controller applies each
	// token once and records it in status.rewind.token; set a new one (a
	// time, a counter, a random string) to rewind again, to the same
	// snapshot or another. `kubectl sandbox rewind` sets the time.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9]([-A-Za-z0-9_.:]*[A-Za-z0-9])?$`
	Token string `json:"token"`
	// snapshotRef rewinds to the snapshot of a SandboxSnapshot in this
	// namespace, once it is ready to use. Its Vercel snapshot must have been
	// taken of this Sandbox's Vercel sandbox (a capture with sandboxRef).
	// +optional
	SnapshotRef *LocalObjectReference `json:"snapshotRef,omitempty"`
	// snapshotID rewinds to a Vercel snapshot of this Sandbox by id, such as
	// one of status.history. Setting it needs the RBAC verb use on
	// vercelsnapshots.sandbox.sentry.io in the namespace, as
	// spec.source.snapshotID does (docs/security.md).
	// +optional
	// +kubebuilder:validation:Pattern=`^(snap_[A-Za-z0-9]{28}|vhs_[a-z0-9]{28})$`
	// +kubebuilder:validation:MaxLength=33
	SnapshotID *string `json:"snapshotID,omitempty"`
}

// RewindState is where the rewind of status.rewind.token stands.
// +kubebuilder:validation:Enum=Rewinding;Rewound;Failed
type RewindState string

const (
	// RewindRewinding: the intent is recorded and the PATCH of
	// currentSnapshotId may or may not have reached Vercel yet; the
	// controller finds out from Vercel before it acts again, so a crash
	// never applies a rewind twice.
	RewindRewinding RewindState = "Rewinding"
	// RewindRewound: Vercel's next session starts from snapshotID.
	RewindRewound RewindState = "Rewound"
	// RewindFailed: the rewind cannot be done (message says why); the
	// sandbox was left as it was.
	RewindFailed RewindState = "Failed"
)

// RewindStatus records the last spec.rewind the controller handled.
type RewindStatus struct {
	// token of the spec.rewind this records.
	// +required
	// +kubebuilder:validation:MaxLength=63
	Token string `json:"token"`
	// state: Rewinding, Rewound or Failed.
	// +required
	State RewindState `json:"state"`
	// snapshotID is the Vercel snapshot rewound to.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	SnapshotID string `json:"snapshotID,omitempty"`
	// snapshotName is the SandboxSnapshot of spec.rewind.snapshotRef, if any.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	SnapshotName string `json:"snapshotName,omitempty"`
	// fromSnapshotID is the snapshot the next session would have resumed
	// from before the rewind (the one the stop took, for a running session).
	// +optional
	// +kubebuilder:validation:MaxLength=64
	FromSnapshotID string `json:"fromSnapshotID,omitempty"`
	// fromSessionID is the last session before the rewind.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	FromSessionID string `json:"fromSessionID,omitempty"`
	// message says what happened, or why the rewind failed.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Message string `json:"message,omitempty"`
	// lastTransitionTime is when state last changed.
	// +optional
	LastTransitionTime *metav1.Time `json:"lastTransitionTime,omitempty"`
}

// SnapshotHistoryEntry is one snapshot of a persistent Sandbox's Vercel
// sandbox (status.history).
type SnapshotHistoryEntry struct {
	// id of the Vercel snapshot; spec.rewind.snapshotID takes it.
	// +required
	// +kubebuilder:validation:MaxLength=64
	ID string `json:"id"`
	// createdAt is when the snapshot was taken.
	// +optional
	CreatedAt *metav1.Time `json:"createdAt,omitempty"`
	// sizeBytes of the snapshot.
	// +optional
	// +kubebuilder:validation:Minimum=0
	SizeBytes int64 `json:"sizeBytes,omitempty"`
	// expiresAt is when Vercel deletes it; unset when it never expires.
	// +optional
	ExpiresAt *metav1.Time `json:"expiresAt,omitempty"`
	// parentID is the snapshot this one's session had resumed from, when
	// Vercel says.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	ParentID string `json:"parentID,omitempty"`
	// current is true for the snapshot the next session resumes from
	// (status.currentSnapshotID).
	// +optional
	Current bool `json:"current,omitempty"`
	// automatic is true for the snapshot a stop took (a pause, an idle
	// stop), false for one taken on request (a SandboxSnapshot capture).
	// +optional
	Automatic bool `json:"automatic,omitempty"`
}
