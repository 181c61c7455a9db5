package controllers

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// CacheOptions are the manager's cache settings: every object is stored
// without its managedFields, which no controller reads and which make up a
// large part of a Sandbox with a full status (one entry per field manager,
// each listing every field it set). At 10,000 Sandboxes that is the
// difference between fitting the manager's memory limit and not.
//
// The kubectl last-applied-configuration annotation is kept on our own
// kinds: the skeleton writes finalizers and labels with an update of the
// cached object, which would delete an annotation the cache had dropped.
//
// Secrets are watched by metadata only (rotation, sandbox_secrets.go), but
// a Secret's metadata can still carry its values: `kubectl apply` stores the
// whole object, data included, in the last-applied-configuration
// annotation. The manager never writes a Secret, so their cache keeps
// nothing but identity and resourceVersion (secretIdentityOnly).
func CacheOptions() cache.Options {
	return cache.Options{
		DefaultTransform: cache.TransformStripManagedFields(),
		ByObject: map[client.Object]cache.ByObject{
			&corev1.Secret{}: {Transform: secretIdentityOnly},
		},
	}
}

// secretIdentityOnly drops everything from a cached Secret's metadata but
// what the rotation watch reads (namespace, name, UID, resourceVersion,
// deletion); a typed Secret, should one ever be cached, loses its values
// too, so no code path can read a Secret value from the cache (values are
// always read uncached, through APIReader).
func secretIdentityOnly(in any) (any, error) {
	obj, err := meta.Accessor(in)
	if err != nil {
		return in, nil // a tombstone: nothing of ours to strip
	}
	obj.SetAnnotations(nil)
	obj.SetLabels(nil)
	obj.SetManagedFields(nil)
	obj.SetOwnerReferences(nil)
	if sec, ok := in.(*corev1.Secret); ok {
		sec.Data, sec.StringData = nil, nil
	}
	return in, nil
}
