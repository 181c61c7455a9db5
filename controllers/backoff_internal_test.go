package controllers

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// Objects that fail at the same moment must not retry at the same moment.
func TestJitteredBackoff(t *testing.T) {
	seen := map[time.Duration]bool{}
	for i := range 50 {
		l := newJitteredBackoff(time.Second, time.Minute)
		item := reconcile.Request{NamespacedName: types.NamespacedName{Name: string(rune('a' + i%26))}}
		d1, d2 := l.When(item), l.When(item)
		if d1 < time.Second || d1 > 1200*time.Millisecond {
			t.Fatalf("first delay %s, want 1s to 1.2s", d1)
		}
		if d2 < 2*time.Second || d2 > 2400*time.Millisecond {
			t.Fatalf("second delay %s, want 2s to 2.4s", d2)
		}
		seen[d1] = true
		l.Forget(item)
		if n := l.NumRequeues(item); n != 0 {
			t.Fatalf("NumRequeues after Forget = %d", n)
		}
	}
	if len(seen) < 10 {
		t.Fatalf("50 first delays took only %d distinct values: no jitter", len(seen))
	}
	capped := newJitteredBackoff(time.Second, time.Minute)
	item := reconcile.Request{NamespacedName: types.NamespacedName{Name: "x"}}
	var d time.Duration
	for range 20 {
		d = capped.When(item)
	}
	if d < time.Minute || d > 72*time.Second {
		t.Fatalf("capped delay %s, want 1m to 1m12s", d)
	}
}
