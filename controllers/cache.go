package controllers

import (
	"sigs.k8s.io/controller-runtime/pkg/cache"
)

// CacheOptions are the manager's cache settings: every object is stored
// without its managedFields, which no controller reads and which make up a
// large part of a Sandbox with a full status (one entry per field manager,
// each listing every field it set). At 10,000 Sandboxes that is the
// difference between fitting the manager's memory limit and not.
//
// The kubectl last-applied-configuration annotation is kept: the skeleton
// writes finalizers and labels with an update of the cached object, which
// would delete an annotation the cache had dropped.
func CacheOptions() cache.Options {
	return cache.Options{DefaultTransform: cache.TransformStripManagedFields()}
}
