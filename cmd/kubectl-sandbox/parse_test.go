package main

import (
	"os"
	"regexp"
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
)

func TestParseRef(t *testing.T) {
	for _, tc := range []struct {
		arg      string
		kind     resourceKind
		name     string
		wantsErr bool
	}{
		{arg: "dev", kind: kindSandbox, name: "dev"},
		{arg: "sbx/dev", kind: kindSandbox, name: "dev"},
		{arg: "sandbox.sandbox.sentry.io/dev", kind: kindSandbox, name: "dev"}, // as -o name prints it
		{arg: "sandboxsnapshot.sandbox.sentry.io/s", kind: kindSnapshot, name: "s"},
		{arg: "snapshot/s", kind: kindSnapshot, name: "s"},
		{arg: "SbxFork/f", kind: kindFork, name: "f"},
		{arg: "pool/p", kind: kindPool, name: "p"},
		{arg: "sandboxpool.sandbox.sentry.io/p", kind: kindPool, name: "p"},
		{arg: "sbxpool/p", kind: kindPool, name: "p"},
		{arg: "pod/x", wantsErr: true},
		{arg: "sandbox/", wantsErr: true},
		{arg: "sandbox/a/b", wantsErr: true},
	} {
		kind, name, err := parseRef(tc.arg)
		if (err != nil) != tc.wantsErr || kind != tc.kind || name != tc.name {
			t.Errorf("parseRef(%q) = %q, %q, %v", tc.arg, kind, name, err)
		}
	}
}

func TestSplitRemote(t *testing.T) {
	for _, tc := range []struct {
		arg, name, path string
		remote          bool
	}{
		{"dev:/tmp/x", "dev", "/tmp/x", true},
		{"dev:", "dev", ".", true},
		{"dev:rel/x", "dev", "rel/x", true},
		{"./a:b", "", "./a:b", false},
		{"/abs/a:b", "", "/abs/a:b", false},
		{"local.txt", "", "local.txt", false},
		{":x", "", ":x", false},
	} {
		name, p, remote := splitRemote(tc.arg)
		if name != tc.name || p != tc.path || remote != tc.remote {
			t.Errorf("splitRemote(%q) = %q, %q, %v", tc.arg, name, p, remote)
		}
	}
}

func TestLineageEdges(t *testing.T) {
	ref := func(n string) *sandboxv1.LocalObjectReference { return &sandboxv1.LocalObjectReference{Name: n} }
	id := "snap_0123456789012345678901234567"
	sbx := func(name string, src sandboxv1.SandboxSource) sandboxv1.Sandbox {
		return sandboxv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: sandboxv1.SandboxSpec{Source: src}}
	}
	snaps := []sandboxv1.SandboxSnapshot{
		// The Sandbox it captured is gone.
		{ObjectMeta: metav1.ObjectMeta{Name: "orphan"}, Spec: sandboxv1.SandboxSnapshotSpec{Source: sandboxv1.SandboxSnapshotSource{SandboxRef: ref("deleted")}},
			Status: sandboxv1.SandboxSnapshotStatus{SnapshotID: id}},
		// A cycle made by hand: a → b → a.
		{ObjectMeta: metav1.ObjectMeta{Name: "a"}, Spec: sandboxv1.SandboxSnapshotSpec{Source: sandboxv1.SandboxSnapshotSource{Recipe: &sandboxv1.SnapshotRecipe{BaseSnapshotRef: ref("b")}}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "b"}, Spec: sandboxv1.SandboxSnapshotSpec{Source: sandboxv1.SandboxSnapshotSource{Recipe: &sandboxv1.SnapshotRecipe{BaseSnapshotRef: ref("a")}}}},
	}
	sandboxes := []sandboxv1.Sandbox{
		sbx("by-id", sandboxv1.SandboxSource{SnapshotID: &id}), // boots from orphan's Vercel snapshot
	}
	roots, nodes := lineage(sandboxes, snaps, nil)
	if n := nodes["SandboxSnapshot/orphan"]; n.parent != "" || n.Note != "from sandbox/deleted (not found)" {
		t.Errorf("orphan: parent %q note %q", n.parent, n.Note)
	}
	if n := nodes["Sandbox/by-id"]; n.parent != "SandboxSnapshot/orphan" {
		t.Errorf("a Sandbox booted by snapshot id is under %q", n.parent)
	}
	// Every object is printed once: the cycle is broken at one member.
	count := 0
	var walk func(*treeNode)
	walk = func(n *treeNode) {
		count++
		for _, c := range n.Children {
			walk(c)
		}
	}
	for _, r := range roots {
		walk(r)
	}
	if count != len(nodes) {
		t.Errorf("the forest holds %d nodes, want %d", count, len(nodes))
	}
}

// The krew manifest installs this binary as `kubectl sandbox` on every
// platform it lists; its uri and sha256 are placeholders until releases exist.
func TestKrewManifest(t *testing.T) {
	b, err := os.ReadFile("../../plugins/krew/sandbox.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct{ Name string }
		Spec       struct {
			Version, Homepage, ShortDescription, Description, Caveats string
			Platforms                                                 []struct {
				Selector struct {
					MatchLabels map[string]string `json:"matchLabels"`
				}
				URI, Sha256, Bin string
				Files            []struct{ From, To string }
			}
		}
	}
	if err := yaml.UnmarshalStrict(b, &m); err != nil {
		t.Fatalf("plugins/krew/sandbox.yaml: %v", err)
	}
	if m.APIVersion != "krew.googlecontainertools.github.com/v1alpha2" || m.Kind != "Plugin" || m.Metadata.Name != "sandbox" {
		t.Errorf("apiVersion %q kind %q name %q", m.APIVersion, m.Kind, m.Metadata.Name)
	}
	if !regexp.MustCompile(`^v\d+\.\d+\.\d+$`).MatchString(m.Spec.Version) || m.Spec.ShortDescription == "" || len(m.Spec.ShortDescription) > 50 {
		t.Errorf("version %q shortDescription %q (krew wants semver and at most 50 characters)", m.Spec.Version, m.Spec.ShortDescription)
	}
	seen := map[string]bool{}
	for _, p := range m.Spec.Platforms {
		osArch := p.Selector.MatchLabels["os"] + "/" + p.Selector.MatchLabels["arch"]
		seen[osArch] = true
		if p.Bin != "kubectl-sandbox" || !regexp.MustCompile(`^[0-9a-f]{64}$`).MatchString(p.Sha256) ||
			!regexp.MustCompile(`^https://.*/kubectl-sandbox_`+p.Selector.MatchLabels["os"]+`_`+p.Selector.MatchLabels["arch"]+`\.tar\.gz$`).MatchString(p.URI) {
			t.Errorf("platform %s: bin %q uri %q sha256 %q", osArch, p.Bin, p.URI, p.Sha256)
		}
		// The archive holds the binary at its root; krew installs only what
		// files names (the binary must be among them, or bin points nowhere).
		if !slices.ContainsFunc(p.Files, func(f struct{ From, To string }) bool { return f.From == p.Bin && f.To == "." }) {
			t.Errorf("platform %s: files %v do not install %s", osArch, p.Files, p.Bin)
		}
	}
	for _, want := range []string{"linux/amd64", "linux/arm64", "darwin/amd64", "darwin/arm64"} {
		if !seen[want] {
			t.Errorf("no platform %s", want)
		}
	}
}
