package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
)

// applyPool creates a SandboxPool of node24 members with one env variable.
func applyPool(t *testing.T, ns, name string, replicas int) {
	t.Helper()
	manifest := fmt.Sprintf(`apiVersion: sandbox.sentry.io/v1alpha1
kind: SandboxPool
metadata: {name: %s, namespace: %s}
spec:
  replicas: %d
  template:
    spec:
      source: {runtime: node24}
      env: [{name: WORKSPACE, value: acme}]
`, name, ns, replicas)
	if r := kubectlIn(t, manifest, "apply", "-f", "-"); r.code != 0 {
		t.Fatalf("apply SandboxPool %s: %s", name, r)
	}
}

// poolRow is the `ls pools` row of a pool, its columns split.
func poolRow(t *testing.T, ns, name string) (header, row []string) {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(ok(t, sandbox(ns, "ls", "pools")...)), "\n")
	header = strings.Fields(lines[0])
	for _, l := range lines[1:] {
		if f := strings.Fields(l); len(f) > 0 && f[0] == name {
			return header, f
		}
	}
	t.Fatalf("ls pools has no row for %s:\n%s", name, strings.Join(lines, "\n"))
	return nil, nil
}

func column(header, row []string, name string) string {
	for i, h := range header {
		if h == name && i < len(row) {
			return row[i]
		}
	}
	return ""
}

func TestUpFromAPool(t *testing.T) {
	ns := newNamespace(t)
	applyPool(t, ns, "warm", 1)
	applyPool(t, ns, "empty", 0)
	if out := ok(t, sandbox(ns, "wait", "pool/warm", "--timeout", "2m")...); out != "sandboxpool.sandbox.sentry.io/warm condition met\n" {
		t.Errorf("wait pool/warm printed %q", out)
	}
	member := ok(t, "get", "sbx", "-n", ns, "-l", sandboxv1.LabelPool+"=warm", "-o", "jsonpath={.items[*].metadata.name}")
	if member == "" || strings.Contains(member, " ") {
		t.Fatalf("want one member of the pool, got %q", member)
	}

	// A claim: the spec is the template's, the flags add the claimant's own
	// fields, and up says which member it took.
	out := ok(t, sandbox(ns, "up", "conv1", "--pool", "warm", "--port", "3000", "--network", "DenyAll")...)
	if want := "sandbox.sandbox.sentry.io/conv1 ready\nsandbox.sandbox.sentry.io/conv1: claimed member " + member + " of SandboxPool warm\n"; out != want {
		t.Errorf("up --pool printed %q, want %q", out, want)
	}
	conv1 := decodeJSON[sandboxv1.Sandbox](t, ok(t, "get", "sbx", "conv1", "-n", ns, "-o", "json"))
	switch s := conv1.Spec; {
	case s.PoolRef == nil || s.PoolRef.Name != "warm" || conv1.Status.Claim == nil || conv1.Status.Claim.Member != member:
		t.Errorf("conv1 poolRef %+v claim %+v", s.PoolRef, conv1.Status.Claim)
	case len(s.Env) != 1 || s.Env[0].Name != "WORKSPACE" || fmt.Sprint(s.Ports) != "[3000]" || s.NetworkPolicy == nil || s.NetworkPolicy.Mode != sandboxv1.NetworkDenyAll:
		t.Errorf("conv1 spec: env %+v ports %v networkPolicy %+v", s.Env, s.Ports, s.NetworkPolicy)
	}

	// An empty pool: created cold, with the reason; -o json keeps stdout the object.
	r := kubectl(t, sandbox(ns, "up", "conv2", "--pool", "empty", "-o", "json")...)
	if r.code != 0 {
		t.Fatalf("up --pool empty: %s", r)
	}
	if conv2 := decodeJSON[sandboxv1.Sandbox](t, r.stdout); conv2.Name != "conv2" || readyOf(&conv2) != "True" {
		t.Errorf("up -o json printed %s/%s ready %q", conv2.Kind, conv2.Name, readyOf(&conv2))
	}
	if !strings.Contains(r.stderr, "sandbox.sandbox.sentry.io/conv2: created cold (PoolEmpty): ") {
		t.Errorf("up from an empty pool does not say it was created cold and why: %s", r)
	}

	// Flags a member cannot take are refused, naming them; nothing is created.
	r = kubectl(t, sandbox(ns, "up", "conv3", "--pool", "warm", "--vcpus", "4", "--runtime", "python3.13", "--port", "8080")...)
	if r.code != 1 || !strings.Contains(r.stderr, "error: claim Sandbox "+ns+"/conv3: --runtime, --vcpus: SandboxPool \"warm\" cannot serve this Sandbox") ||
		!strings.Contains(r.stderr, "--allow-cold") || strings.Contains(r.stderr, "--port") {
		t.Errorf("up --pool with --vcpus and --runtime: want exit 1 naming both flags (not --port) and --allow-cold, got %s", r)
	}
	if g := kubectl(t, "get", "sbx", "conv3", "-n", ns); g.code == 0 {
		t.Errorf("a refused claim created the Sandbox")
	}
	// The template's own value is no change.
	dry := ok(t, sandbox(ns, "create", "conv4", "--pool", "warm", "--env", "WORKSPACE=acme", "--dry-run=client", "-o", "yaml")...)
	var conv4 sandboxv1.Sandbox
	if err := yaml.UnmarshalStrict([]byte(dry), &conv4); err != nil || conv4.Spec.PoolRef == nil || conv4.Spec.PoolRef.Name != "warm" {
		t.Errorf("create --pool --dry-run=client: %v\n%s", err, dry)
	}
	// --allow-cold: created cold, and says why before and after.
	r = kubectl(t, sandbox(ns, "up", "conv3", "--pool", "warm", "--vcpus", "4", "--allow-cold")...)
	if r.code != 0 || !strings.Contains(r.stderr, "Sandbox conv3 will be created cold (--allow-cold): --vcpus change spec.resources") ||
		!strings.Contains(r.stdout, "sandbox.sandbox.sentry.io/conv3: created cold (SpecMismatch): ") || !strings.Contains(r.stdout, "spec.resources") {
		t.Errorf("up --pool --vcpus --allow-cold: %s", r)
	}
	if r := kubectl(t, sandbox(ns, "up", "conv5", "--allow-cold")...); r.code != 1 || !strings.Contains(r.stderr, "--allow-cold applies with --pool only") {
		t.Errorf("--allow-cold without --pool: %s", r)
	}
	if r := kubectl(t, sandbox(ns, "up", "conv5", "--pool", "nothing")...); r.code != 1 || !strings.Contains(r.stderr, `sandboxpools.sandbox.sentry.io "nothing" not found`) {
		t.Errorf("up --pool of a missing pool: %s", r)
	}

	t.Run("ls and status", func(t *testing.T) {
		// The pools count their claimants as the controller sees them.
		var header, warm, empty []string
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
			header, warm = poolRow(t, ns, "warm")
			_, empty = poolRow(t, ns, "empty")
			if (column(header, warm, "HITS") == "1" && column(header, empty, "MISSES") == "1") || time.Now().After(deadline) {
				break
			}
		}
		if want := "NAME READY REPLICAS MEMBERS CLAIMS/MIN HITS MISSES REPLENISH AGE"; strings.Join(header, " ") != want {
			t.Errorf("ls pools header %q, want %q", strings.Join(header, " "), want)
		}
		// warm: one hit (conv1) and one cold claim for a mismatch (conv3), which is no miss.
		if column(header, warm, "HITS") != "1" || column(header, warm, "MISSES") != "0" || column(header, warm, "REPLICAS") != "1" ||
			column(header, empty, "MISSES") != "1" || column(header, empty, "READY") != "0/0" || column(header, empty, "CLAIMS/MIN") == "<none>" {
			t.Errorf("ls pools rows: warm %v, empty %v", warm, empty)
		}
		if rep, err := time.ParseDuration(column(header, warm, "REPLENISH")); err != nil || rep > time.Minute {
			t.Errorf("ls pools replenish time %v (%v): %v", rep, err, warm)
		}
		if out := ok(t, sandbox(ns, "ls", "pools", "-o", "name")...); out != "sandboxpool.sandbox.sentry.io/empty\nsandboxpool.sandbox.sentry.io/warm\n" {
			t.Errorf("ls pools -o name printed %q", out)
		}
		if wide := ok(t, sandbox(ns, "ls", "pools", "-o", "wide")...); !strings.Contains(wide, "MEMBER-STATE") || !strings.Contains(wide, "runtime node24") {
			t.Errorf("ls pools -o wide:\n%s", wide)
		}
		desc := ok(t, sandbox(ns, "status", "pool/warm")...)
		for _, want := range []string{"Kind:", "SandboxPool", "Member state:", "Running", "Hits:", "Misses:", "Replenish:", "Claims/min:", "Conditions:"} {
			if !strings.Contains(desc, want) {
				t.Errorf("status pool/warm does not show %q:\n%s", want, desc)
			}
		}
	})

	t.Run("scale and rm", func(t *testing.T) {
		if out := ok(t, sandbox(ns, "scale", "pool/empty", "--replicas", "2")...); out != "sandboxpool.sandbox.sentry.io/empty scaled\n" {
			t.Errorf("scale pool/empty printed %q", out)
		}
		// scale waited for the members.
		if got := ok(t, "get", "sbxpool", "empty", "-n", ns, "-o", "jsonpath={.spec.replicas} {.status.readyReplicas}"); got != "2 2" {
			t.Errorf("after scale --replicas 2: spec.replicas and status.readyReplicas %q", got)
		}
		if out := ok(t, sandbox(ns, "rm", "pool/warm")...); out != "sandboxpool.sandbox.sentry.io/warm deleted\n" {
			t.Errorf("rm pool/warm printed %q", out)
		}
		// Its unclaimed members went with it; the Sandbox that claimed one stays.
		if left := ok(t, "get", "sbx", "-n", ns, "-l", sandboxv1.LabelPool+"=warm", "-o", "name"); left != "" {
			t.Errorf("members left after rm pool/warm: %q", left)
		}
		ok(t, "get", "sbx", "conv1", "-n", ns)
		ok(t, sandbox(ns, "rm", "pool/empty", "conv1", "conv2", "conv3")...)
	})
}
