package chart

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

// shardDeployments returns the Deployments of a sharded render, by shard
// index, after checking that each runs its own shard (--shards, --shard-index,
// its own selector) and that they differ in nothing else.
func shardDeployments(t *testing.T, objs []*unstructured.Unstructured) []*appsv1.Deployment {
	t.Helper()
	deps := ofKind(objs, "Deployment")
	out := make([]*appsv1.Deployment, len(deps))
	for _, u := range deps {
		d := &appsv1.Deployment{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, d); err != nil {
			t.Fatal(err)
		}
		var idx int
		if _, err := fmt.Sscanf(d.Spec.Selector.MatchLabels["sandbox.sentry.io/shard"], "%d", &idx); err != nil || idx < 0 || idx >= len(deps) || out[idx] != nil {
			t.Fatalf("Deployment %s: selector %v does not name one shard of %d", d.Name, d.Spec.Selector.MatchLabels, len(deps))
		}
		if got := d.Spec.Template.Labels["sandbox.sentry.io/shard"]; got != fmt.Sprint(idx) {
			t.Errorf("Deployment %s: pods labelled shard %q, selector %d", d.Name, got, idx)
		}
		if want := fmt.Sprintf("-controller-manager-shard-%d", idx); !strings.HasSuffix(d.Name, want) {
			t.Errorf("Deployment %s: want a name ending in %s", d.Name, want)
		}
		args := d.Spec.Template.Spec.Containers[0].Args
		for _, a := range []string{fmt.Sprintf("--shards=%d", len(deps)), fmt.Sprintf("--shard-index=%d", idx)} {
			if !slices.Contains(args, a) {
				t.Errorf("Deployment %s: args %q lack %s", d.Name, args, a)
			}
		}
		out[idx] = d
	}
	// Apart from the shard, the Deployments are the same.
	norm := func(d *appsv1.Deployment) string {
		c := d.DeepCopy()
		c.Name = ""
		delete(c.Spec.Selector.MatchLabels, "sandbox.sentry.io/shard")
		delete(c.Spec.Template.Labels, "sandbox.sentry.io/shard")
		c.Spec.Template.Spec.Containers[0].Args = slices.DeleteFunc(slices.Clone(c.Spec.Template.Spec.Containers[0].Args),
			func(a string) bool { return strings.HasPrefix(a, "--shard-index=") })
		b, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	for _, d := range out[1:] {
		if norm(d) != norm(out[0]) {
			t.Errorf("Deployment %s differs from %s beyond its shard", d.Name, out[0].Name)
		}
	}
	return out
}

// TestShardedRender: sharding.shards=3 renders three Deployments and three
// PodDisruptionBudgets, one per shard, and unsharded renders stay as they
// were (no shard flags, label or suffix).
func TestShardedRender(t *testing.T) {
	objs := render(t, "r", "ns", "--set", "sharding.shards=3", "--set", "replicas=2", "--set", "podDisruptionBudget.enabled=true")
	deps := shardDeployments(t, objs)
	if len(deps) != 3 {
		t.Fatalf("want 3 Deployments, got %d", len(deps))
	}
	for _, d := range deps {
		if *d.Spec.Replicas != 2 {
			t.Errorf("Deployment %s: %d replicas, want replicas=2 per shard", d.Name, *d.Spec.Replicas)
		}
	}
	pdbs := ofKind(objs, "PodDisruptionBudget")
	if len(pdbs) != 3 {
		t.Fatalf("want one PodDisruptionBudget per shard, got %v", names(pdbs))
	}
	for i, p := range pdbs {
		sel, _, _ := unstructured.NestedStringMap(p.Object, "spec", "selector", "matchLabels")
		if sel["sandbox.sentry.io/shard"] != fmt.Sprint(i) {
			t.Errorf("PodDisruptionBudget %s selects %v: want shard %d only", p.GetName(), sel, i)
		}
	}

	d := theDeployment(t, render(t, "r", "ns", "--set", "sharding.shards=1"))
	if _, ok := d.Spec.Selector.MatchLabels["sandbox.sentry.io/shard"]; ok || strings.Contains(d.Name, "shard") {
		t.Errorf("unsharded Deployment %s has shard labels %v", d.Name, d.Spec.Selector.MatchLabels)
	}
	for _, a := range d.Spec.Template.Spec.Containers[0].Args {
		if strings.HasPrefix(a, "--shard") {
			t.Errorf("unsharded Deployment passes %s", a)
		}
	}
}
