package main

import (
	"reflect"
	"strings"
	"testing"

	"github.com/getsentry/sandbox-controller/localstack/oidcissuer"
)

func TestParseOIDCTrust(t *testing.T) {
	got, err := parseOIDCTrust("acme/junior/production, acme/junior/preview,beta/web/production")
	if err != nil {
		t.Fatal(err)
	}
	want := []oidcissuer.Trust{
		{Team: "acme", Functions: []oidcissuer.Function{{Project: "junior", Environment: "production"}, {Project: "junior", Environment: "preview"}}},
		{Team: "beta", Functions: []oidcissuer.Function{{Project: "web", Environment: "production"}}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v, want %+v", got, want)
	}
	for _, bad := range []string{"", "acme/junior", "acme//production", "acme/junior/production/x", "acme/junior/production,"} {
		if _, err := parseOIDCTrust(bad); err == nil || !strings.Contains(err.Error(), "--oidc-trust") {
			t.Errorf("parseOIDCTrust(%q) = %v, want an error naming --oidc-trust", bad, err)
		}
	}
}
