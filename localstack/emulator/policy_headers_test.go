package emulator

import (
	"reflect"
	"testing"
)

// The injected header values the emulator holds for a session, in both
// request forms: what a test reads to see a rotated value arrive.
func TestInjectedHeaders(t *testing.T) {
	for _, tc := range []struct {
		name, raw string
		want      map[string]map[string]string
	}{
		{"no policy", ``, map[string]map[string]string{}},
		{"allow-all", `{"mode":"allow-all"}`, map[string]map[string]string{}},
		{"mode form", `{"mode":"custom","allowedDomains":["api.github.com"],"injectionRules":[{"domain":"api.github.com","headers":{"Authorization":"Bearer a"}}]}`,
			map[string]map[string]string{"api.github.com": {"Authorization": "Bearer a"}}},
		{"allow form", `{"allow":{"api.github.com":[{"transform":[{"headers":{"Authorization":"Bearer b"}}]}]}}`,
			map[string]map[string]string{"api.github.com": {"Authorization": "Bearer b"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := parsePolicy([]byte(tc.raw))
			if err != nil {
				t.Fatalf("parsePolicy: %v", err.message)
			}
			if got := p.injectedHeaders(); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("injectedHeaders() = %v, want %v", got, tc.want)
			}
		})
	}
}
