package v1alpha1

// VercelRegion is a Vercel region a sandbox's sessions can run in
// (docs/dev/vercel-sandbox-api.md §5.1).
// +kubebuilder:validation:Enum=iad1;sfo1;cle1;cdg1;fra1;arn1;sin1;pdx1;lhr1;icn1;bom1;cpt1;dub1;gru1;hkg1;syd1;yul1;hnd1;kix1
type VercelRegion string

// The operator's snapshot retention of persistent Sandboxes, sent
// explicitly on every create and change so that a change of Vercel's own
// defaults (once 7 days and one snapshot, then reverted) does not change
// what a Sandbox keeps (docs/sandbox.md).
const (
	// DefaultKeepLastSnapshots is snapshotRetention.keepLast when unset.
	DefaultKeepLastSnapshots int32 = 5
	// DefaultSnapshotExpireAfterSeconds is
	// snapshotRetention.expireAfterSeconds when unset: 30 days, Vercel's
	// default on the API version the operator calls.
	DefaultSnapshotExpireAfterSeconds int64 = 30 * 24 * 3600
)

// SnapshotRetention says how many of a persistent Sandbox's own snapshots
// (the one each stop takes, which the next session resumes from) Vercel
// keeps, and for how long.
type SnapshotRetention struct {
	// keepLast is how many of its latest snapshots the sandbox keeps; an
	// older one is deleted when a newer one is taken (Vercel's
	// keepLastSnapshots.count). 1 to 10; 5 when unset.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10
	KeepLast *int32 `json:"keepLast,omitempty"`
	// expireAfterSeconds is how long a snapshot lives after it was last
	// used; 0 means never (Vercel's snapshotExpiration). 30 days when unset.
	// A Sandbox whose snapshot expired cannot resume (Resumable=False,
	// SnapshotMissing).
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=31536000
	ExpireAfterSeconds *int64 `json:"expireAfterSeconds,omitempty"`
}

// KeepLastOrDefault is keepLast, or DefaultKeepLastSnapshots.
func (r *SnapshotRetention) KeepLastOrDefault() int32 {
	if r == nil || r.KeepLast == nil {
		return DefaultKeepLastSnapshots
	}
	return *r.KeepLast
}

// ExpireAfterSecondsOrDefault is expireAfterSeconds, or
// DefaultSnapshotExpireAfterSeconds.
func (r *SnapshotRetention) ExpireAfterSecondsOrDefault() int64 {
	if r == nil || r.ExpireAfterSeconds == nil {
		return DefaultSnapshotExpireAfterSeconds
	}
	return *r.ExpireAfterSeconds
}
