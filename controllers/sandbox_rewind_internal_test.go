package controllers

import (
	"reflect"
	"testing"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
)

// recordedRewind: which token is pending, in flight, done or failed.
func TestRecordedRewind(t *testing.T) {
	id := "snap_a"
	spec := &sandboxv1.SandboxRewind{Token: "t2", SnapshotID: &id}
	for _, tc := range []struct {
		name string
		spec *sandboxv1.SandboxRewind
		rec  *sandboxv1.RewindStatus
		want rewindPlan
	}{
		{"no spec.rewind", nil, &sandboxv1.RewindStatus{Token: "t1", State: sandboxv1.RewindFailed, Message: "m"}, rewindPlan{}},
		{"a new token", spec, nil, rewindPlan{pending: true}},
		{"a new token after an older one", spec, &sandboxv1.RewindStatus{Token: "t1", State: sandboxv1.RewindRewound}, rewindPlan{pending: true}},
		{"this token done", spec, &sandboxv1.RewindStatus{Token: "t2", State: sandboxv1.RewindRewound}, rewindPlan{}},
		{"this token failed: Ready says so", spec, &sandboxv1.RewindStatus{Token: "t2", State: sandboxv1.RewindFailed, Message: "m"}, rewindPlan{failed: "m"}},
		{"this token's intent recorded", spec, &sandboxv1.RewindStatus{Token: "t2", State: sandboxv1.RewindRewinding, SnapshotID: id},
			rewindPlan{pending: true, inFlight: true, target: id}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sbx := &sandboxv1.Sandbox{Spec: sandboxv1.SandboxSpec{Rewind: tc.spec}, Status: sandboxv1.SandboxStatus{Rewind: tc.rec}}
			if got := recordedRewind(sbx); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("recordedRewind() = %+v, want %+v", got, tc.want)
			}
		})
	}
}
