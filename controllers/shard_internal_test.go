package controllers

import (
	"context"
	"fmt"
	"testing"

	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// The hash is part of the contract between replicas of different versions:
// these values must never change (FNV-1a 32: "" is the offset basis
// 0x811c9dc5, "a" is 0xe40c292c).
func TestShardOfIsFNV1a(t *testing.T) {
	for _, c := range []struct {
		ns    string
		count int
		want  int
	}{
		{"", 7, int(uint32(0x811c9dc5) % 7)},
		{"a", 7, int(uint32(0xe40c292c) % 7)},
		{"team-a", 1, 0},
		{"team-a", 0, 0},
	} {
		if got := ShardOf(c.ns, c.count); got != c.want {
			t.Errorf("ShardOf(%q, %d) = %d, want %d", c.ns, c.count, got, c.want)
		}
	}
	// Every namespace has exactly one owner among the shards, and a hundred
	// namespaces spread over both of two shards.
	per := map[int]int{}
	for i := range 100 {
		ns := fmt.Sprintf("ns-%d", i)
		owners := 0
		for idx := range 2 {
			if (Shard{Index: idx, Count: 2}).Owns(ns) {
				owners++
				per[idx]++
			}
		}
		if owners != 1 {
			t.Errorf("%s has %d owners among 2 shards", ns, owners)
		}
	}
	if per[0] < 30 || per[1] < 30 {
		t.Errorf("100 namespaces split %v between 2 shards", per)
	}
}

func TestShardValidateAndLease(t *testing.T) {
	for _, s := range []Shard{{}, {Index: 0, Count: 1}, {Index: 2, Count: 3}} {
		if err := s.Validate(); err != nil {
			t.Errorf("%+v: %v", s, err)
		}
	}
	for _, s := range []Shard{{Index: 1, Count: 1}, {Index: 3, Count: 3}, {Index: -1, Count: 2}, {Count: -1}} {
		if err := s.Validate(); err == nil {
			t.Errorf("%+v accepted", s)
		}
	}
	if got := LeaderElectionID(Shard{Count: 1}); got != "sandbox-controller.sandbox.sentry.io" {
		t.Errorf("unsharded lease %q: must keep the name of earlier versions", got)
	}
	if a, b := LeaderElectionID(Shard{Index: 0, Count: 2}), LeaderElectionID(Shard{Index: 1, Count: 2}); a == b || a != "sandbox-controller-shard-0-of-2.sandbox.sentry.io" {
		t.Errorf("shard leases %q and %q", a, b)
	}
}

// The guard drops another shard's requests whatever queued them.
func TestShardGuard(t *testing.T) {
	var seen []string
	inner := reconcile.Func(func(_ context.Context, req ctrl.Request) (ctrl.Result, error) {
		seen = append(seen, req.Namespace)
		return ctrl.Result{}, nil
	})
	s := Shard{Index: 1, Count: 2}
	g := s.guard(inner)
	var mine, theirs []string
	for i := range 20 {
		ns := fmt.Sprintf("ns-%d", i)
		if _, err := g.Reconcile(context.Background(), ctrl.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: "x"}}); err != nil {
			t.Fatal(err)
		}
		if ShardOf(ns, 2) == 1 {
			mine = append(mine, ns)
		} else {
			theirs = append(theirs, ns)
		}
	}
	if fmt.Sprint(seen) != fmt.Sprint(mine) || len(theirs) == 0 {
		t.Errorf("reconciled %v, want exactly this shard's %v (other shard's: %v)", seen, mine, theirs)
	}
}
