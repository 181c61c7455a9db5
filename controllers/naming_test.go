package controllers

import (
	"regexp"
	"strconv"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
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

func TestLabelValue(t *testing.T) {
	at63 := strings.Repeat("a", 63)
	long := strings.Repeat("b", 100)
	tests := []struct{ name, want string }{
		{"fork", "fork"},
		{"a.b-c", "a.b-c"},
		{at63, at63},
		{long, ""}, // hashed; checked below
		{strings.Repeat("c", 45) + ".-" + strings.Repeat("d", 40), ""},
	}
	for _, tt := range tests {
		got := labelValue(tt.name)
		if errs := validation.IsValidLabelValue(got); len(errs) > 0 {
			t.Errorf("labelValue(%q) = %q: %v", tt.name, got, errs)
		}
		if tt.want != "" && got != tt.want {
			t.Errorf("labelValue(%q) = %q, want %q", tt.name, got, tt.want)
		}
	}
	a, b := labelValue(long), labelValue(long+"x")
	if a == b {
		t.Errorf("long names collide: %q", a)
	}
	if len(a) != maxLabelValueLength || !strings.HasPrefix(a, strings.Repeat("b", 46)+"-") {
		t.Errorf("labelValue(100 b) = %q: want the first 46 characters, '-' and a hash, 63 in all", a)
	}
}

func TestDerivedName(t *testing.T) {
	at253 := strings.Repeat("f", 253)
	dotted := strings.Repeat("g", 227) + "." + strings.Repeat("h", 30) // the cut lands right after the dot
	tests := []struct{ base, suffix, want string }{
		{"try", "-0", "try-0"},
		{"try", "-capture", "try-capture"},
		{strings.Repeat("e", 251), "-0", strings.Repeat("e", 251) + "-0"},
		{at253, "-0", ""},
		{at253, "-99", ""},
		{at253, "-capture", ""},
		{dotted, "-capture", ""},
	}
	for _, tt := range tests {
		got := derivedName(tt.base, tt.suffix)
		if errs := validation.IsDNS1123Subdomain(got); len(errs) > 0 {
			t.Errorf("derivedName(%d characters, %q) = %q: %v", len(tt.base), tt.suffix, got, errs)
		}
		if tt.want != "" && got != tt.want {
			t.Errorf("derivedName(%q, %q) = %q, want %q", tt.base, tt.suffix, got, tt.want)
		}
		if !strings.HasSuffix(got, tt.suffix) {
			t.Errorf("derivedName(..., %q) = %q lost its suffix", tt.suffix, got)
		}
	}
	if derivedName(at253, "-0") == derivedName(at253[:252]+"x", "-0") {
		t.Error("long bases that differ only past the cut collide")
	}
}

// Every label value and derived name is valid for every valid object name.
func FuzzDerivedNames(f *testing.F) {
	f.Add("fork", uint8(0))
	f.Add(strings.Repeat("a", 63), uint8(7))
	f.Add(strings.Repeat("a.b-", 63)+"c", uint8(99))
	f.Fuzz(func(t *testing.T, name string, idx uint8) {
		if len(validation.IsDNS1123Subdomain(name)) > 0 {
			return
		}
		if v := labelValue(name); len(validation.IsValidLabelValue(v)) > 0 {
			t.Fatalf("labelValue(%q) = %q: not a label value", name, v)
		}
		for _, suffix := range []string{"-capture", "-" + strconv.Itoa(int(idx))} {
			if n := derivedName(name, suffix); len(validation.IsDNS1123Subdomain(n)) > 0 {
				t.Fatalf("derivedName(%q, %q) = %q: not a name", name, suffix, n)
			}
		}
	})
}
