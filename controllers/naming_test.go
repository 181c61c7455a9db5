package controllers

import (
	"regexp"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/types"
)

var validVercelName = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,128}$`)

func TestVercelName(t *testing.T) {
	long := strings.Repeat("n", 253)
	tests := []struct {
		namespace, name string
		uid             types.UID
		want            string
	}{
		{"default", "my-box", "0f1e2d3c-aaaa-bbbb", "default-my-box-0f1e2d3c"},
		{"team.a", "conv.42", "12345678-x", "team-a-conv-42-12345678"},
		{"ns", "short", "abc", "ns-short-abc"},
		{"ns", long, "0f1e2d3c-aaaa", ""}, // hashed; checked below
	}
	for _, tt := range tests {
		got := vercelName(tt.namespace, tt.name, tt.uid)
		if !validVercelName.MatchString(got) {
			t.Errorf("vercelName(%q, %q) = %q: not a valid Vercel name", tt.namespace, tt.name, got)
		}
		if tt.want != "" && got != tt.want {
			t.Errorf("vercelName(%q, %q, %q) = %q, want %q", tt.namespace, tt.name, tt.uid, got, tt.want)
		}
		if got != vercelName(tt.namespace, tt.name, tt.uid) {
			t.Errorf("vercelName is not deterministic for %q", tt.name)
		}
	}
	a := vercelName("ns", long, "0f1e2d3c-aaaa")
	b := vercelName("ns", long, "0f1e2d3c-bbbb")
	if a == b {
		t.Errorf("long names with different UIDs collide: %q", a)
	}
	if len(a) != maxVercelNameLength {
		t.Errorf("long name has length %d, want %d", len(a), maxVercelNameLength)
	}
}

func FuzzVercelName(f *testing.F) {
	f.Add("default", "sandbox", "0f1e2d3c-aaaa-bbbb-cccc-000000000000")
	f.Add("a.b", "ü-ñ/..", "")
	f.Add(strings.Repeat("x", 63), strings.Repeat("y", 253), "uid")
	f.Fuzz(func(t *testing.T, namespace, name, uid string) {
		if namespace == "" && name == "" && uid == "" {
			return
		}
		got := vercelName(namespace, name, types.UID(uid))
		if !validVercelName.MatchString(got) {
			t.Fatalf("vercelName(%q, %q, %q) = %q: not a valid Vercel name", namespace, name, uid, got)
		}
	})
}
