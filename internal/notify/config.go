package notify

import (
	"context"
	"fmt"
	"net/url"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ConfigMapName is the ConfigMap that turns notifications on in its namespace.
// Its keys:
//
//	url         the receiver (http or https); required
//	secretName  the Secret in the same namespace holding the signing key; required
//	secretKey   the key in that Secret (default "key")
const ConfigMapName = "sandbox-notifications"

// MinKeyLength is the shortest signing key accepted, in bytes.
const MinKeyLength = 16

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
		u, err := url.Parse(cm.Data["url"])
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return Endpoint{}, false, fmt.Errorf("ConfigMap %s/%s: url must be an http or https URL", ns, ConfigMapName)
		}
		name, key := cm.Data["secretName"], cm.Data["secretKey"]
		if name == "" {
			return Endpoint{}, false, fmt.Errorf("ConfigMap %s/%s: secretName is required: messages are always signed", ns, ConfigMapName)
		}
		if key == "" {
			key = "key"
		}
		var sec corev1.Secret
		if err := r.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &sec); err != nil {
			return Endpoint{}, false, fmt.Errorf("get the signing Secret %s/%s: %w", ns, name, err)
		}
		value := sec.Data[key]
		if len(value) < MinKeyLength {
			return Endpoint{}, false, fmt.Errorf("signing Secret %s/%s: key %q must hold at least %d bytes", ns, name, key, MinKeyLength)
		}
		return Endpoint{URL: u.String(), Key: value}, true, nil
	}
}
