package controllers

import (
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
)

// The fork's status counts the wanted children only, and is Ready once each
// of them is.
func TestRecordChildren(t *testing.T) {
	child := func(name string, ready bool) *sandboxv1.Sandbox {
		s := &sandboxv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: name}}
		s.Status.Phase = sandboxv1.SandboxPending
		status := metav1.ConditionFalse
		if ready {
			s.Status.Phase = sandboxv1.SandboxRunning
			status = metav1.ConditionTrue
		}
		meta.SetStatusCondition(&s.Status.Conditions, metav1.Condition{Type: sandboxv1.ConditionReady, Status: status, Reason: "X"})
		return s
	}
	tests := []struct {
		name                 string
		have                 map[int32]*sandboxv1.Sandbox
		want                 int32
		phase                sandboxv1.SandboxForkPhase
		reason, text         string
		children             []string
		replicas, readyCount int32
	}{
		{"every wanted child ready", map[int32]*sandboxv1.Sandbox{0: child("f-0", true), 1: child("f-1", true)}, 2,
			sandboxv1.ForkReady, sandboxv1.ReasonAllReady, "2/2", []string{"f-0", "f-1"}, 2, 2},
		{"one child not ready yet", map[int32]*sandboxv1.Sandbox{1: child("f-1", false), 0: child("f-0", true)}, 2,
			sandboxv1.ForkCreating, sandboxv1.ReasonCreatingChildren, "1/2", []string{"f-0", "f-1"}, 2, 1},
		{"a child above replicas is being deleted and not counted", map[int32]*sandboxv1.Sandbox{0: child("f-0", true), 1: child("f-1", false)}, 1,
			sandboxv1.ForkReady, sandboxv1.ReasonAllReady, "1/1", []string{"f-0"}, 1, 1},
		{"a missing child", map[int32]*sandboxv1.Sandbox{1: child("f-1", true)}, 2,
			sandboxv1.ForkCreating, sandboxv1.ReasonCreatingChildren, "1/2", []string{"f-1"}, 1, 1},
		{"no children wanted", map[int32]*sandboxv1.Sandbox{0: child("f-0", true)}, 0,
			sandboxv1.ForkReady, sandboxv1.ReasonAllReady, "0/0", nil, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fork := &sandboxv1.SandboxFork{ObjectMeta: metav1.ObjectMeta{Generation: 3}}
			fork.Status.Children = []sandboxv1.ForkChildStatus{{Name: "stale"}}
			recordChildren(fork, tt.have, tt.want)
			st := fork.Status
			if st.Phase != tt.phase || st.ReadyText != tt.text || st.Replicas != tt.replicas || st.ReadyReplicas != tt.readyCount {
				t.Errorf("phase %s ready %q replicas %d/%d, want %s %q %d/%d", st.Phase, st.ReadyText, st.ReadyReplicas, st.Replicas, tt.phase, tt.text, tt.readyCount, tt.replicas)
			}
			var names []string
			for _, c := range st.Children {
				names = append(names, c.Name)
			}
			if len(names) != len(tt.children) || (tt.children == nil) != (st.Children == nil) {
				t.Fatalf("children %v, want %v", names, tt.children)
			}
			for i := range names {
				if names[i] != tt.children[i] {
					t.Errorf("children %v, want %v (by index)", names, tt.children)
				}
			}
			c := meta.FindStatusCondition(st.Conditions, sandboxv1.ConditionReady)
			if c == nil || c.Reason != tt.reason || c.ObservedGeneration != 3 {
				t.Errorf("Ready = %+v, want reason %s at generation 3", c, tt.reason)
			}
		})
	}
}

func TestReplicasOf(t *testing.T) {
	for _, tt := range []struct {
		replicas *int32
		want     int32
	}{{nil, 1}, {ptr.To[int32](0), 0}, {ptr.To[int32](5), 5}} {
		fork := &sandboxv1.SandboxFork{Spec: sandboxv1.SandboxForkSpec{Replicas: tt.replicas}}
		if got := replicasOf(fork); got != tt.want {
			t.Errorf("replicasOf(%v) = %d, want %d", tt.replicas, got, tt.want)
		}
	}
}
