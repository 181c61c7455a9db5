package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// Condition types shared by every kind.
const (
	// ConditionReady is True when the remote object is usable: for a Sandbox, its
	// session runs and its setup commands succeeded.
	ConditionReady = "Ready"
	// ConditionSynced is True when the last reconcile reached Vercel and every call
	// succeeded; False with the Vercel error's reason otherwise.
	ConditionSynced = "Synced"
)

// Condition reasons shared by every kind.
const (
	// ReasonReconciled is set on Synced=True after a reconcile that succeeded.
	ReasonReconciled = "Reconciled"
	// ReasonNotFound is set when the remote object vanished outside the operator.
	ReasonNotFound = "NotFound"
	// ReasonRateLimited is set on Synced=False when Vercel answered 429; the
	// controller retries after the Retry-After delay.
	ReasonRateLimited = "RateLimited"
	// ReasonTransient is set on Synced=False for 5xx answers and connection
	// errors; the controller retries with a backoff capped at one minute.
	ReasonTransient = "Transient"
	// ReasonInvalid is set when Vercel rejected the spec as invalid; the
	// controller does not retry until the spec changes.
	ReasonInvalid = "Invalid"
	// ReasonUnauthorized is set when Vercel refused the manager's credentials.
	ReasonUnauthorized = "Unauthorized"
	// ReasonPaymentRequired is set when Vercel answered 402 for the account.
	ReasonPaymentRequired = "PaymentRequired"
	// ReasonSecretNotFound is set when a referenced Secret or key does not exist.
	ReasonSecretNotFound = "SecretNotFound"
)

// DeletionPolicy says what happens to the remote object when the Kubernetes
// object is deleted.
// +kubebuilder:validation:Enum=Delete;Retain
type DeletionPolicy string

const (
	// DeletionPolicyDelete deletes the remote object before the finalizer is removed.
	DeletionPolicyDelete DeletionPolicy = "Delete"
	// DeletionPolicyRetain leaves the remote object in Vercel (orphans it).
	DeletionPolicyRetain DeletionPolicy = "Retain"
)

// LocalObjectReference names an object in the same namespace.
type LocalObjectReference struct {
	// name of the referenced object.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
}

// SecretKeySelector selects one key of a Secret in the same namespace. The
// value is read by the controller when it calls Vercel and never written to
// status, events or logs.
type SecretKeySelector struct {
	// name of the Secret.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// key within the Secret's data.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[-._a-zA-Z0-9]+$`
	Key string `json:"key"`
}

// ErrorStatus records the last error the controller met.
type ErrorStatus struct {
	// time the error was observed.
	// +required
	Time metav1.Time `json:"time"`
	// reason is a CamelCase classification of the error (e.g. RateLimited, Invalid).
	// +required
	// +kubebuilder:validation:MaxLength=128
	Reason string `json:"reason"`
	// message is a human-readable description; it never contains a secret.
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	Message string `json:"message,omitempty"`
}
