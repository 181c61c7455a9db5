package controllers

import (
	"strings"
	"testing"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
)

// Names and markers derived from hashes identify remote objects and running
// setup of clusters already deployed: a refactoring that changes one orphans
// them. These values were taken from the code before shortHash existed.
func TestDerivedNamesAreStable(t *testing.T) {
	for _, tc := range []struct{ what, got, want string }{
		{"vercelName (truncated)", vercelName(strings.Repeat("n", 63), strings.Repeat("b", 253), "0123456789abcdef"),
			strings.Repeat("n", 63) + "-" + strings.Repeat("b", 47) + "-c1b61d19bac81fb9"},
		{"hashedName", hashedName(strings.Repeat("x", 80), "-0", 63), strings.Repeat("x", 44) + "-d929cdeea7e6a0f4-0"},
		{"clusterShort", clusterShort("prod-eu"), "3312b695"},
		{"builderName (rebuild)", builderName("prod-eu", "team-a", "ab12ab12ab12ab12", "snap_x"), "team-a-build-3312b695-ab12ab12ab12ab12-6baf8325"},
		{"setupHash", setupHash([]sandboxv1.SetupCommand{{Name: "deps", Command: "npm", Args: []string{"ci"}}}), "8c1138425a4a8b79"},
	} {
		if tc.got != tc.want {
			t.Errorf("%s = %q, want %q", tc.what, tc.got, tc.want)
		}
	}
}
