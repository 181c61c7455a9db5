package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is the group and version of every kind in this package.
	GroupVersion = schema.GroupVersion{Group: "sandbox.sentry.io", Version: "v1alpha1"}

	// SchemeGroupVersion is GroupVersion under the name the generated
	// clientset, listers and informers (k8s.io/code-generator) refer to.
	SchemeGroupVersion = GroupVersion

	// SchemeBuilder registers the kinds of this package with a runtime.Scheme.
	// It is apimachinery's, not controller-runtime's, so importing the API
	// does not pull controller-runtime into a client program.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds the kinds of this package to a runtime.Scheme.
	AddToScheme = SchemeBuilder.AddToScheme

	// objectTypes are the kinds each *_types.go file appends in its init.
	objectTypes []runtime.Object
)

// Resource returns the group-qualified resource, e.g. Resource("sandboxes").
func Resource(resource string) schema.GroupResource {
	return GroupVersion.WithResource(resource).GroupResource()
}

func addKnownTypes(scheme *runtime.Scheme) error {
	scheme.AddKnownTypes(GroupVersion, objectTypes...)
	metav1.AddToGroupVersion(scheme, GroupVersion)
	return nil
}
