package v1alpha1_test

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
)

// TestManagedImagesAgree: the managed images anyone may start from are listed
// three times — ManagedImages, the admission policy that lets them through
// without the use verb, and the SandboxPool template rule — and must agree,
// or a managed image would be refused somewhere (or a team's image let
// through).
func TestManagedImagesAgree(t *testing.T) {
	var want []string
	for _, i := range sandboxv1.ManagedImages {
		want = append(want, string(i))
	}
	quoted := regexp.MustCompile(`'(vercel/sandbox/[^']+)'`)
	for _, f := range []string{
		filepath.Join("..", "..", "config", "admission", "images.yaml"),
		filepath.Join("..", "..", "config", "crd", "bases", "sandbox.sentry.io_sandboxpools.yaml"),
	} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, m := range quoted.FindAllStringSubmatch(string(b), -1) {
			got = append(got, m[1])
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s lists the managed images %v; api/v1alpha1.ManagedImages %v", f, got, want)
		}
	}
}

// TestImageReferencePattern: the references Vercel's registry takes pass the
// CRD's pattern, and what is not a reference does not.
func TestImageReferencePattern(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "config", "crd", "bases", "sandbox.sentry.io_sandboxes.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?s)image:\n\s+description:.*?pattern: (\S+)`).FindSubmatch(b)
	if m == nil {
		t.Fatal("no pattern for spec.source.image in the Sandbox CRD")
	}
	pattern := regexp.MustCompile(string(m[1]))
	for _, ok := range []string{"vercel/sandbox/node:24", "agent", "agent:1.4", "team/project/agent:1.4", "vcr.vercel.com/team/agent:v2",
		"agent@sha256:" + strings.Repeat("a", 64), "team/agent:1.4@sha256:" + strings.Repeat("0", 64), "localhost:5000/agent"} {
		if !pattern.MatchString(ok) {
			t.Errorf("%q is refused", ok)
		}
	}
	for _, bad := range []string{"", "Agent", "agent:", "/agent", "agent//x", "agent@sha256:abc", "agent:tag with space", "https://vcr.vercel.com/a", "a:-x"} {
		if pattern.MatchString(bad) {
			t.Errorf("%q is accepted", bad)
		}
	}
}
