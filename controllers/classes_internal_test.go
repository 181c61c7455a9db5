package controllers

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
)

func TestPinnedClass(t *testing.T) {
	for _, c := range []struct {
		name   string
		spec   *string
		labels map[string]string
		want   string
		known  bool
	}{
		{"nothing", nil, nil, "", false},
		{"spec wins over the label", ptr.To("a"), map[string]string{sandboxv1.LabelClass: "b"}, "a", true},
		{"label pins", nil, map[string]string{sandboxv1.LabelClass: "b"}, "b", true},
		{"empty label pins no class", nil, map[string]string{sandboxv1.LabelClass: ""}, "", true},
	} {
		sbx := &sandboxv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Labels: c.labels}, Spec: sandboxv1.SandboxSpec{ClassName: c.spec}}
		got, known := pinnedClass(sbx)
		if got != c.want || known != c.known {
			t.Errorf("%s: pinnedClass = %q, %v; want %q, %v", c.name, got, known, c.want, c.known)
		}
	}
}

func TestClassMismatch(t *testing.T) {
	in := func(class string) context.Context {
		if class == "" {
			return context.Background()
		}
		return context.WithValue(context.Background(), classKey{}, &classBinding{name: class})
	}
	snap := func(class *string, label map[string]string) *sandboxv1.SandboxSnapshot {
		return &sandboxv1.SandboxSnapshot{ObjectMeta: metav1.ObjectMeta{Name: "s", Labels: label}, Spec: sandboxv1.SandboxSnapshotSpec{ClassName: class}}
	}
	for _, c := range []struct {
		name     string
		ctx      context.Context
		ref      *sandboxv1.SandboxSnapshot
		mismatch bool
	}{
		{"same class", in("a"), snap(ptr.To("a"), nil), false},
		{"other class", in("a"), snap(ptr.To("b"), nil), true},
		{"class against none", in("a"), snap(nil, map[string]string{sandboxv1.LabelClass: ""}), true},
		{"none against a class", in(""), snap(ptr.To("b"), nil), true},
		{"not known yet", in("a"), snap(nil, nil), false},
		{"none and none", in(""), snap(nil, map[string]string{sandboxv1.LabelClass: ""}), false},
	} {
		msg := classMismatch(c.ctx, c.ref, "SandboxSnapshot", "spec.source.snapshotRef")
		if (msg != "") != c.mismatch {
			t.Errorf("%s: classMismatch = %q", c.name, msg)
		}
		if msg != "" && !strings.Contains(msg, `SandboxSnapshot "s" (spec.source.snapshotRef)`) {
			t.Errorf("%s: the message does not name the reference: %q", c.name, msg)
		}
	}
}

func TestApplyClassDefaults(t *testing.T) {
	d := &sandboxv1.SandboxClassDefaults{
		Resources:     &sandboxv1.SandboxResources{VCPUs: ptr.To[int32](4)},
		Idle:          &sandboxv1.IdlePolicy{Action: sandboxv1.IdleDelete},
		NetworkPolicy: &sandboxv1.NetworkPolicy{Mode: sandboxv1.NetworkDenyAll},
	}
	empty := &sandboxv1.Sandbox{}
	applyClassDefaults(empty, d)
	if *empty.Spec.Resources.VCPUs != 4 || empty.Spec.Idle.Action != sandboxv1.IdleDelete || empty.Spec.NetworkPolicy.Mode != sandboxv1.NetworkDenyAll {
		t.Errorf("unset fields not defaulted: %+v", empty.Spec)
	}
	empty.Spec.NetworkPolicy.Mode = sandboxv1.NetworkAllowAll
	if d.NetworkPolicy.Mode != sandboxv1.NetworkDenyAll {
		t.Error("the object shares the class's defaults instead of a copy")
	}

	set := &sandboxv1.Sandbox{Spec: sandboxv1.SandboxSpec{
		Resources:     &sandboxv1.SandboxResources{VCPUs: ptr.To[int32](1)},
		Idle:          &sandboxv1.IdlePolicy{Action: sandboxv1.IdleStop},
		NetworkPolicy: &sandboxv1.NetworkPolicy{Mode: sandboxv1.NetworkAllowAll},
	}}
	applyClassDefaults(set, d)
	if *set.Spec.Resources.VCPUs != 1 || set.Spec.Idle.Action != sandboxv1.IdleStop || set.Spec.NetworkPolicy.Mode != sandboxv1.NetworkAllowAll {
		t.Errorf("fields the object sets were overwritten: %+v", set.Spec)
	}
}

// A nil ClassClients (a reconciler built without classes) binds nothing and
// pins nothing: the manager's own client, as before classes existed.
func TestNilClassClients(t *testing.T) {
	var c *ClassClients
	sbx := &sandboxv1.Sandbox{Spec: sandboxv1.SandboxSpec{ClassName: ptr.To("a")}}
	ctx, b := c.bind(context.Background(), sbx)
	if b.refused != nil || !b.resolved || b.name != "" || classNameIn(ctx) != "" {
		t.Errorf("bind = %+v", b)
	}
	if c.pin(context.Background(), sbx, "a") {
		t.Error("pin changed the object")
	}
}

// An unpinned object's class is decided by its creationTimestamp, which only
// the API server sets, against the default class's; never by its status
// (a tenant with status rights writes conditions, and a pause or a refusal
// writes them too).
func TestFreshClass(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	def := &sandboxv1.SandboxClass{ObjectMeta: metav1.ObjectMeta{Name: "default", CreationTimestamp: metav1.NewTime(t0)}}
	for _, c := range []struct {
		name    string
		created time.Time
		def     *sandboxv1.SandboxClass
		want    string
	}{
		{"no default class", t0, nil, ""},
		{"created before the default class", t0.Add(-time.Second), def, ""},
		{"created in the same second", t0, def, "default"},
		{"created after", t0.Add(time.Hour), def, "default"},
		{"not created yet (no timestamp)", time.Time{}, def, "default"},
	} {
		if got := freshClass(metav1.NewTime(c.created), c.def); got != c.want {
			t.Errorf("%s: freshClass = %q, want %q", c.name, got, c.want)
		}
	}
	// The conditions an object carries play no part.
	sbx := &sandboxv1.Sandbox{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: metav1.NewTime(t0.Add(time.Hour))}}
	sbx.Status.Conditions = []metav1.Condition{{Type: sandboxv1.ConditionPaused, Status: metav1.ConditionTrue}}
	if got := freshClass(sbx.CreationTimestamp, def); got != "default" {
		t.Errorf("an object with conditions created after the default class: %q", got)
	}
}

func TestApplyClassPlacementAndRetentionDefaults(t *testing.T) {
	d := &sandboxv1.SandboxClassDefaults{
		Region:            "fra1",
		FailoverRegions:   []sandboxv1.VercelRegion{"cdg1", "iad1"},
		SnapshotRetention: &sandboxv1.SnapshotRetention{KeepLast: ptr.To[int32](2)},
	}
	for _, c := range []struct {
		name       string
		spec, want sandboxv1.SandboxSpec
	}{
		{name: "unset: the class's region with its failover list, and its retention",
			want: sandboxv1.SandboxSpec{Region: "fra1", FailoverRegions: []sandboxv1.VercelRegion{"cdg1", "iad1"}, SnapshotRetention: &sandboxv1.SnapshotRetention{KeepLast: ptr.To[int32](2)}}},
		{name: "own region: no failover list of the class's (it could name that region)",
			spec: sandboxv1.SandboxSpec{Region: "cdg1"},
			want: sandboxv1.SandboxSpec{Region: "cdg1", SnapshotRetention: &sandboxv1.SnapshotRetention{KeepLast: ptr.To[int32](2)}}},
		{name: "own failover list only: kept, no class region",
			spec: sandboxv1.SandboxSpec{FailoverRegions: []sandboxv1.VercelRegion{"sfo1"}},
			want: sandboxv1.SandboxSpec{FailoverRegions: []sandboxv1.VercelRegion{"sfo1"}, SnapshotRetention: &sandboxv1.SnapshotRetention{KeepLast: ptr.To[int32](2)}}},
		{name: "non-persistent: no retention",
			spec: sandboxv1.SandboxSpec{Persistent: ptr.To(false)},
			want: sandboxv1.SandboxSpec{Persistent: ptr.To(false), Region: "fra1", FailoverRegions: []sandboxv1.VercelRegion{"cdg1", "iad1"}}},
		{name: "own retention kept",
			spec: sandboxv1.SandboxSpec{SnapshotRetention: &sandboxv1.SnapshotRetention{KeepLast: ptr.To[int32](9)}},
			want: sandboxv1.SandboxSpec{Region: "fra1", FailoverRegions: []sandboxv1.VercelRegion{"cdg1", "iad1"}, SnapshotRetention: &sandboxv1.SnapshotRetention{KeepLast: ptr.To[int32](9)}}},
	} {
		sbx := &sandboxv1.Sandbox{Spec: c.spec}
		applyClassDefaults(sbx, d)
		if !reflect.DeepEqual(sbx.Spec, c.want) {
			t.Errorf("%s: spec %+v, want %+v", c.name, sbx.Spec, c.want)
		}
		if len(sbx.Spec.FailoverRegions) > 0 && &sbx.Spec.FailoverRegions[0] == &d.FailoverRegions[0] {
			t.Errorf("%s: the object shares the class's failover list", c.name)
		}
	}
}
