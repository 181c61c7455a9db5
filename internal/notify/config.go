package notify

import (
	"context"
	"fmt"
	"net/url"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ConfigMapName is the ConfigMap that turns notifications on in its namespace.
// Its keys:
//
//	url         the receiver (http or https); required
//	secretName  the Secret in the same namespace holding the signing key,
//	            labelled KeyLabel=true; required
//	secretKey   the key in that Secret (default "key")
const ConfigMapName = "sandbox-notifications"

// KeyLabel must be "true" on the Secret a ConfigMap names as its signing
// key. Every message is an HMAC under that key, which its receiver — chosen
// by whoever writes the ConfigMap — can test guesses of the key against
// offline; so the key must be one the ConfigMap's writer may have anyway, not
// any Secret of the namespace. Setting a label on a Secret takes create,
// update or patch on it, and each of those gives its value (the writer chose
// it, or the API server's answer carries it): a Secret carrying the label was
// made, or marked, by someone who may read it, for this use.
const KeyLabel = "sandbox.sentry.io/notification-key"

// MinKeyLength is the shortest signing key accepted, in bytes.
const MinKeyLength = 16

// Reasons of the Warning events about a sandbox-notifications ConfigMap.
const (
	// ReasonConfigInvalid: a key of the ConfigMap is missing or wrong (the
	// message names it); nothing is sent until it is fixed.
	ReasonConfigInvalid = "NotificationConfigInvalid"
	// ReasonKeyRefused: secretName names no Secret labelled KeyLabel=true in
	// the namespace; nothing is sent, so no message is signed with a Secret
	// that was not made for it.
	ReasonKeyRefused = "NotificationKeyRefused"
	// ReasonDestinationRefused: the receiver's address is internal
	// (loopback, link-local, private, ...) and not allowed by the manager's
	// --notify-allow-destinations; no connection was made.
	ReasonDestinationRefused = "NotificationDestinationRefused"
)

// ConfigError is a configuration its writer must fix: the notifier reports it
// as a Warning event about Object.
type ConfigError struct {
	Object  runtime.Object
	Reason  string
	Message string
}

func (e *ConfigError) Error() string { return e.Message }

// ConfigMapResolver resolves a namespace's webhook from its
// sandbox-notifications ConfigMap and the Secret it names, read with r (the
// manager's API reader: ConfigMaps and Secrets are not cached, and read only
// for namespaces that have transitions to announce).
func ConfigMapResolver(r client.Reader) Resolver {
	return func(ctx context.Context, ns string) (Endpoint, bool, error) {
		var cm corev1.ConfigMap
		if err := r.Get(ctx, types.NamespacedName{Namespace: ns, Name: ConfigMapName}, &cm); err != nil {
			if apierrors.IsNotFound(err) {
				return Endpoint{}, false, nil
			}
			return Endpoint{}, false, fmt.Errorf("get ConfigMap %s/%s: %w", ns, ConfigMapName, err)
		}
		invalid := func(reason, format string, args ...any) (Endpoint, bool, error) {
			return Endpoint{}, false, &ConfigError{Object: &cm, Reason: reason, Message: fmt.Sprintf(format, args...)}
		}
		u, err := url.Parse(cm.Data["url"])
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return invalid(ReasonConfigInvalid, "url: must be an http or https URL with a host; nothing is sent")
		}
		name, key := cm.Data["secretName"], cm.Data["secretKey"]
		if name == "" {
			return invalid(ReasonConfigInvalid, "secretName: required, messages are always signed; nothing is sent")
		}
		if key == "" {
			key = "key"
		}
		var sec corev1.Secret
		if err := r.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &sec); err != nil && !apierrors.IsNotFound(err) {
			return Endpoint{}, false, fmt.Errorf("get the signing Secret %s/%s: %w", ns, name, err)
		} else if err != nil || sec.Labels[KeyLabel] != "true" {
			// One message for both, so the event tells a writer without
			// Secret access nothing about which Secrets exist.
			return invalid(ReasonKeyRefused, "secretName %q: no Secret of that name labelled %s=true in this namespace; the signing key must be a Secret made for it, nothing is sent", name, KeyLabel)
		}
		value := sec.Data[key]
		if len(value) < MinKeyLength {
			return invalid(ReasonConfigInvalid, "secretKey %q: the Secret %s must hold at least %d bytes under this key; nothing is sent", key, name, MinKeyLength)
		}
		if _, err := StandardKey(value); err != nil {
			return invalid(ReasonConfigInvalid, "secretKey %q: %s (a Standard Webhooks secret); nothing is sent", key, err)
		}
		return Endpoint{URL: u.String(), Key: value, Source: &cm}, true, nil
	}
}
