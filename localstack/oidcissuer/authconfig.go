package oidcissuer

import (
	"errors"
	"fmt"
	"strings"

	"sigs.k8s.io/yaml"
)

// UsernamePrefix is put before `sub` to make the Kubernetes user name, so a
// Vercel identity can never be mistaken for another authenticator's user
// (a ServiceAccount, a system: user).
const UsernamePrefix = "vercel:"

// Function is one project's deployments in one environment.
type Function struct {
	Project     string
	Environment string
}

// Trust says which functions of a team the API server accepts. Other
// projects and environments of the team are refused (401), as are tokens for
// any audience other than the team's default one.
type Trust struct {
	Team      string
	Functions []Function
}

// User is the Kubernetes user name the API server gives f's token: what a
// RoleBinding names.
func User(team string, f Function) string {
	return UsernamePrefix + Token{Team: team, Project: f.Project, Environment: f.Environment}.Subject()
}

// Group is the Kubernetes group every environment of a project gets: bind
// it to trust preview and production deployments alike.
func Group(team, project string) string {
	return "vercel:owner:" + team + ":project:" + project
}

// The structured authentication configuration (apiserver.config.k8s.io/v1),
// the fields used here only. k8s.io/apiserver's own types would pull that
// module into go.mod as a direct dependency for six structs.
type (
	authenticationConfiguration struct {
		APIVersion string     `json:"apiVersion"`
		Kind       string     `json:"kind"`
		JWT        []jwtAuthn `json:"jwt"`
	}
	jwtAuthn struct {
		Issuer               issuer                `json:"issuer"`
		ClaimValidationRules []claimValidationRule `json:"claimValidationRules"`
		ClaimMappings        claimMappings         `json:"claimMappings"`
	}
	issuer struct {
		URL                  string   `json:"url"`
		CertificateAuthority string   `json:"certificateAuthority"`
		Audiences            []string `json:"audiences"`
		AudienceMatchPolicy  string   `json:"audienceMatchPolicy"`
	}
	claimValidationRule struct {
		Expression string `json:"expression"`
		Message    string `json:"message"`
	}
	claimMappings struct {
		Username prefixedClaim `json:"username"`
		Groups   prefixedClaim `json:"groups"`
	}
	prefixedClaim struct {
		Claim      string  `json:"claim,omitempty"`
		Prefix     *string `json:"prefix,omitempty"`
		Expression string  `json:"expression,omitempty"`
	}
)

// AuthenticationConfig is the file kube-apiserver's --authentication-config
// reads to trust this issuer for the given teams' functions: the rules
// docs/clients.md documents, with this issuer's URL and CA in place of
// Vercel's.
func (i *Issuer) AuthenticationConfig(trusts ...Trust) ([]byte, error) {
	if len(trusts) == 0 {
		return nil, errors.New("OIDC authentication config: no team to trust")
	}
	cfg := authenticationConfiguration{APIVersion: "apiserver.config.k8s.io/v1", Kind: "AuthenticationConfiguration"}
	prefix := UsernamePrefix
	for _, t := range trusts {
		rule, err := subjectRule(t)
		if err != nil {
			return nil, err
		}
		cfg.JWT = append(cfg.JWT, jwtAuthn{
			Issuer: issuer{
				URL:                  i.IssuerURL(t.Team),
				CertificateAuthority: string(i.ca),
				Audiences:            []string{Audience(t.Team)},
				AudienceMatchPolicy:  "MatchAny",
			},
			ClaimValidationRules: []claimValidationRule{rule},
			ClaimMappings: claimMappings{
				Username: prefixedClaim{Claim: "sub", Prefix: &prefix},
				Groups:   prefixedClaim{Expression: `['vercel:owner:' + claims.owner + ':project:' + claims.project]`},
			},
		})
	}
	return yaml.Marshal(cfg)
}

// subjectRule admits exactly the trusted functions' subjects.
func subjectRule(t Trust) (claimValidationRule, error) {
	if len(t.Functions) == 0 {
		return claimValidationRule{}, fmt.Errorf("OIDC trust of team %q: no functions", t.Team)
	}
	subs := make([]string, 0, len(t.Functions))
	for _, f := range t.Functions {
		tok := Token{Team: t.Team, Project: f.Project, Environment: f.Environment}
		// The slugs validate() admits hold no quote, so they can be
		// written into the CEL string literals as they are.
		if err := tok.validate(); err != nil {
			return claimValidationRule{}, fmt.Errorf("OIDC trust: %w", err)
		}
		subs = append(subs, "'"+tok.Subject()+"'")
	}
	return claimValidationRule{
		Expression: "claims.sub in [" + strings.Join(subs, ", ") + "]",
		Message:    "this project and environment may not use the cluster",
	}, nil
}
