package controllers

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A Secret applied with kubectl carries its values in the
// last-applied-configuration annotation; the manager's cache must keep none
// of it, whether the Secret is cached as metadata or typed.
func TestSecretIdentityOnly(t *testing.T) {
	const canary = "canary-value-do-not-cache"
	meta := func() metav1.ObjectMeta {
		return metav1.ObjectMeta{
			Namespace: "ns", Name: "s", UID: "u", ResourceVersion: "7",
			Labels:          map[string]string{"app": canary},
			Annotations:     map[string]string{"kubectl.kubernetes.io/last-applied-configuration": `{"stringData":{"k":"` + canary + `"}}`},
			ManagedFields:   []metav1.ManagedFieldsEntry{{Manager: "kubectl"}},
			OwnerReferences: []metav1.OwnerReference{{Name: canary}},
		}
	}
	for _, obj := range []any{
		&metav1.PartialObjectMetadata{ObjectMeta: meta()},
		&corev1.Secret{ObjectMeta: meta(), Data: map[string][]byte{"k": []byte(canary)}, StringData: map[string]string{"k": canary}},
	} {
		out, err := secretIdentityOnly(obj)
		if err != nil {
			t.Fatalf("%T: %v", obj, err)
		}
		var m *metav1.ObjectMeta
		switch o := out.(type) {
		case *metav1.PartialObjectMetadata:
			m = &o.ObjectMeta
		case *corev1.Secret:
			m = &o.ObjectMeta
			if o.Data != nil || o.StringData != nil {
				t.Errorf("typed Secret keeps its values")
			}
		}
		if m.Annotations != nil || m.Labels != nil || m.ManagedFields != nil || m.OwnerReferences != nil {
			t.Errorf("%T keeps metadata beyond its identity: %+v", obj, m)
		}
		if m.Namespace != "ns" || m.Name != "s" || m.UID != "u" || m.ResourceVersion != "7" {
			t.Errorf("%T lost its identity: %+v", obj, m)
		}
	}
}
