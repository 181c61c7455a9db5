package controllers

import (
	"testing"
	"time"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
)

// A capture records what children inherit and nothing else: no setup, no
// state, nothing absolute in time.
func TestSourceSpecOf(t *testing.T) {
	secret := sandboxv1.EnvVar{Name: "TOKEN", ValueFrom: &sandboxv1.EnvVarSource{SecretKeyRef: sandboxv1.SecretKeySelector{Name: "creds", Key: "token"}}}
	sbx := &sandboxv1.Sandbox{Spec: sandboxv1.SandboxSpec{
		Source:         runtimeSrc("node24"),
		Resources:      &sandboxv1.SandboxResources{VCPUs: ptr.To[int32](2)},
		Ports:          []int32{3000},
		TimeoutSeconds: ptr.To[int64](600),
		Env:            []sandboxv1.EnvVar{{Name: "MODE", Value: ptr.To("fast")}, secret},
		NetworkPolicy:  &sandboxv1.NetworkPolicy{Mode: sandboxv1.NetworkDenyAll},
		Persistent:     ptr.To(false),
		Setup:          []sandboxv1.SetupCommand{{Command: "npm", Args: []string{"ci"}}},
		State:          sandboxv1.SandboxStateStopped,
		ShutdownTime:   &metav1.Time{Time: time.Now().Add(-time.Hour)},
		ShutdownPolicy: sandboxv1.ShutdownDelete,
	}}
	got := sourceSpecOf(sbx)
	want := &sandboxv1.SourceSandboxSpec{
		Resources:      &sandboxv1.SandboxResources{VCPUs: ptr.To[int32](2)},
		Ports:          []int32{3000},
		TimeoutSeconds: ptr.To[int64](600),
		Env:            []sandboxv1.EnvVar{{Name: "MODE", Value: ptr.To("fast")}, secret},
		NetworkPolicy:  &sandboxv1.NetworkPolicy{Mode: sandboxv1.NetworkDenyAll},
		Persistent:     ptr.To(false),
	}
	if !apiequality.Semantic.DeepEqual(got, want) {
		t.Fatalf("sourceSpecOf = %+v, want %+v", got, want)
	}
	sbx.Spec.Env[0].Value = ptr.To("changed")
	if *got.Env[0].Value != "fast" {
		t.Error("the recorded spec shares memory with the Sandbox")
	}
}

func TestInheritedSpec(t *testing.T) {
	recorded := &sandboxv1.SourceSandboxSpec{NetworkPolicy: &sandboxv1.NetworkPolicy{Mode: sandboxv1.NetworkDenyAll}}
	id := "snap_" + "0123456789012345678901234567"
	captured := sandboxv1.SandboxSnapshotSource{SandboxRef: &sandboxv1.LocalObjectReference{Name: "src"}}
	tests := []struct {
		name        string
		inherit     sandboxv1.ForkInheritance
		source      sandboxv1.SandboxSnapshotSource
		recorded    *sandboxv1.SourceSandboxSpec
		want        *sandboxv1.SourceSandboxSpec
		wantUnknown bool
	}{
		{"capture with its spec", "", captured, recorded, recorded, false},
		{"capture with its spec, explicit SourceSpec", sandboxv1.InheritSourceSpec, captured, recorded, recorded, false},
		{"capture without a recorded spec", "", captured, nil, nil, true},
		{"imported by id", "", sandboxv1.SandboxSnapshotSource{SnapshotID: &id}, nil, nil, true},
		{"recipe: no source Sandbox", "", sandboxv1.SandboxSnapshotSource{Recipe: &sandboxv1.SnapshotRecipe{}}, nil, nil, false},
		{"None ignores a recorded spec", sandboxv1.InheritNone, captured, recorded, nil, false},
		{"None accepts an unknown spec", sandboxv1.InheritNone, sandboxv1.SandboxSnapshotSource{SnapshotID: &id}, nil, nil, false},
	}
	for _, tt := range tests {
		fork := &sandboxv1.SandboxFork{Spec: sandboxv1.SandboxForkSpec{Template: sandboxv1.SandboxForkTemplate{Inherit: tt.inherit}}}
		snap := &sandboxv1.SandboxSnapshot{Spec: sandboxv1.SandboxSnapshotSpec{Source: tt.source}, Status: sandboxv1.SandboxSnapshotStatus{SourceSpec: tt.recorded}}
		got, unknown := inheritedSpec(fork, snap)
		if got != tt.want || (unknown != "") != tt.wantUnknown {
			t.Errorf("%s: inheritedSpec = %v, %q; want %v, unknown %v", tt.name, got, unknown, tt.want, tt.wantUnknown)
		}
	}
}

// Template fields replace inherited ones; the rest is inherited; the source,
// deletion policy and state come from the fork, never from the source.
func TestChildSpec(t *testing.T) {
	inherited := &sandboxv1.SourceSandboxSpec{
		Ports:          []int32{3000},
		TimeoutSeconds: ptr.To[int64](600),
		Env:            []sandboxv1.EnvVar{{Name: "MODE", Value: ptr.To("fast")}},
		NetworkPolicy:  &sandboxv1.NetworkPolicy{Mode: sandboxv1.NetworkDenyAll},
		Persistent:     ptr.To(false),
	}
	fork := &sandboxv1.SandboxFork{Spec: sandboxv1.SandboxForkSpec{
		DeletionPolicy: sandboxv1.DeletionPolicyRetain,
		Template: sandboxv1.SandboxForkTemplate{Spec: sandboxv1.SandboxOverrides{
			TimeoutSeconds: ptr.To[int64](900),
			State:          sandboxv1.SandboxStateStopped,
		}},
	}}
	snap := &sandboxv1.SandboxSnapshot{ObjectMeta: metav1.ObjectMeta{Name: "cap"}}
	got := childSpec(fork, snap, inherited)
	want := sandboxv1.SandboxSpec{
		Source:         sandboxv1.SandboxSource{SnapshotRef: &sandboxv1.LocalObjectReference{Name: "cap"}},
		DeletionPolicy: sandboxv1.DeletionPolicyRetain,
		State:          sandboxv1.SandboxStateStopped,
		Ports:          []int32{3000},
		TimeoutSeconds: ptr.To[int64](900),
		Env:            []sandboxv1.EnvVar{{Name: "MODE", Value: ptr.To("fast")}},
		NetworkPolicy:  &sandboxv1.NetworkPolicy{Mode: sandboxv1.NetworkDenyAll},
		Persistent:     ptr.To(false),
	}
	if !apiequality.Semantic.DeepEqual(got, want) {
		t.Fatalf("childSpec =\n%+v\nwant\n%+v", got, want)
	}
	got.Env[0].Value = ptr.To("changed")
	if *inherited.Env[0].Value != "fast" {
		t.Error("a child's spec shares memory with the snapshot's status")
	}
	if got := childSpec(fork, snap, nil); got.NetworkPolicy != nil || got.Env != nil || *got.TimeoutSeconds != 900 {
		t.Errorf("childSpec without an inherited spec = %+v", got)
	}
}

func runtimeSrc(rt string) sandboxv1.SandboxSource {
	r := sandboxv1.Runtime(rt)
	return sandboxv1.SandboxSource{Runtime: &r}
}

// A fork stored before the API server refused controller keys in templates
// must not hand them to its children: abandon-remote would leak their
// sandboxes on delete, and a forged lineage label would mislead.
func TestNewChildDropsReservedKeys(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := sandboxv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	r := &SandboxForkReconciler{Client: fake.NewClientBuilder().WithScheme(scheme).Build()}
	fork := &sandboxv1.SandboxFork{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "f", UID: "u"}}
	fork.Spec.Source.SnapshotRef = &sandboxv1.LocalObjectReference{Name: "snap"}
	fork.Spec.Template.Metadata.Labels = map[string]string{"team": "a", sandboxv1.LabelClass: "", sandboxv1.LabelForkIndex: "9"}
	fork.Spec.Template.Metadata.Annotations = map[string]string{"note": "kept", sandboxv1.AnnotationAbandonRemote: "true", sandboxv1.AnnotationPaused: "true"}
	snap := &sandboxv1.SandboxSnapshot{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "snap"}}
	child := r.newChild(fork, snap, nil, 2)
	if want := map[string]string{"note": "kept"}; !apiequality.Semantic.DeepEqual(child.Annotations, want) {
		t.Errorf("annotations = %v, want %v", child.Annotations, want)
	}
	if _, ok := child.Labels[sandboxv1.LabelClass]; ok {
		t.Errorf("the class label reached the child: %v", child.Labels)
	}
	if child.Labels["team"] != "a" || child.Labels[sandboxv1.LabelForkIndex] != "2" {
		t.Errorf("labels = %v", child.Labels)
	}
}
