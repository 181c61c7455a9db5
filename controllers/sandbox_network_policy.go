package controllers

// Translation of spec.networkPolicy to Vercel's network policy
// (docs/dev/vercel-sandbox-api.md §3.6). AllowAll and DenyAll go in the mode
// form (A), as they always have. Every Allowlist policy goes in the
// allow/subnets form (B), the form the official SDK 3.5 sends for a custom
// policy: only it can carry forwardURL and response rules, and one form per
// mode means a spec that gains its first rule does not switch forms under a
// running session (and the shorthand fields and allow are translated by one
// path). How the shorthand combines with allow is on the API type.

import (
	"context"
	"fmt"
	"net/url"
	"regexp"
	"strings"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
	"github.com/getsentry/sandbox-controller/internal/vercel"
)

// policyError is spec.networkPolicy input the API server cannot check: the
// field and what is wrong with it. It never holds a Secret's value.
type policyError struct {
	field, problem string
}

func (e *policyError) Error() string { return e.field + ": " + e.problem }

// buildNetworkPolicy translates spec.networkPolicy, reading the Secret
// values it references through secrets. Nil leaves Vercel's default.
func buildNetworkPolicy(ctx context.Context, secrets *secretReader, np *sandboxv1.NetworkPolicy) (*vercel.NetworkPolicy, error) {
	if np == nil {
		return nil, nil
	}
	if np.Mode == sandboxv1.NetworkAllowlist {
		return buildAllowPolicy(ctx, secrets, np)
	}
	rules, err := injectionRules(ctx, secrets, np.InjectHeaders)
	if err != nil {
		return nil, err
	}
	return modePolicy(np.Mode, rules), nil
}

// modePolicy is the mode form of AllowAll and DenyAll. Header injection
// always uses the custom mode, since Vercel attaches the rules to it; in
// AllowAll mode the allowlist is a lone "*" so egress stays open — assuming
// Vercel reads a bare "*" as every host, which its documentation leaves
// open (docs/sandbox.md says so to users). DenyAll with injection reaches
// the injected domains only.
func modePolicy(mode sandboxv1.NetworkMode, rules []vercel.InjectionRule) *vercel.NetworkPolicy {
	if len(rules) == 0 {
		if mode == sandboxv1.NetworkDenyAll {
			return &vercel.NetworkPolicy{Mode: vercel.NetworkDenyAll}
		}
		return &vercel.NetworkPolicy{Mode: vercel.NetworkAllowAll}
	}
	if mode == sandboxv1.NetworkDenyAll {
		domains := make([]string, 0, len(rules))
		for _, r := range rules {
			domains = append(domains, r.Domain)
		}
		return &vercel.NetworkPolicy{Mode: vercel.NetworkCustom, AllowedDomains: domains, InjectionRules: rules}
	}
	return &vercel.NetworkPolicy{Mode: vercel.NetworkCustom, AllowedDomains: []string{"*"}, InjectionRules: rules}
}

// injectionRules reads injectHeaders' values: one rule per domain.
func injectionRules(ctx context.Context, secrets *secretReader, injections []sandboxv1.HeaderInjection) ([]vercel.InjectionRule, error) {
	var rules []vercel.InjectionRule
	for _, inj := range injections {
		headers, err := secretHeaders(ctx, secrets, inj.Headers, func(name string) string {
			return fmt.Sprintf("the header %s injected for %s (spec.networkPolicy.injectHeaders)", name, inj.Domain)
		})
		if err != nil {
			return nil, err
		}
		rules = append(rules, vercel.InjectionRule{Domain: inj.Domain, Headers: headers})
	}
	return rules, nil
}

// secretHeaders reads each header's value from its Secret; field names,
// for a missing Secret, what needs it.
func secretHeaders(ctx context.Context, secrets *secretReader, hs []sandboxv1.InjectedHeader, field func(name string) string) (map[string]string, error) {
	headers := make(map[string]string, len(hs))
	for _, h := range hs {
		v, err := secrets.value(ctx, h.ValueFrom.SecretKeyRef.Name, h.ValueFrom.SecretKeyRef.Key)
		if err != nil {
			return nil, neededBy(err, field(h.Name))
		}
		headers[h.Name] = v
	}
	return headers, nil
}

// buildAllowPolicy is the form B of an Allowlist policy. The domains are
// allowedDomains, then injectHeaders', then allow's, each once; a domain's
// rules are its injectHeaders transform (no match) first, then its allow
// rules in order (CEL keeps a domain with allow rules out of injectHeaders,
// so the transform, which claims every request, shadows no rule). Without any rule the policy is the plain domain list, as
// the SDK sends it.
func buildAllowPolicy(ctx context.Context, secrets *secretReader, np *sandboxv1.NetworkPolicy) (*vercel.NetworkPolicy, error) {
	var domains []string
	rules := map[string][]vercel.NetworkRule{}
	hasRules := false
	for _, d := range np.AllowedDomains {
		domains = appendUnique(domains, d)
	}
	injections, err := injectionRules(ctx, secrets, np.InjectHeaders)
	if err != nil {
		return nil, err
	}
	for _, inj := range injections {
		domains = appendUnique(domains, inj.Domain)
		rules[inj.Domain] = append(rules[inj.Domain], vercel.NetworkRule{Transform: []vercel.NetworkTransform{{Headers: inj.Headers}}})
		hasRules = true
	}
	for i, entry := range np.Allow {
		domains = appendUnique(domains, entry.Domain)
		for j := range entry.Rules {
			r, err := networkRule(ctx, secrets, entry.Domain, &entry.Rules[j], fmt.Sprintf("spec.networkPolicy.allow[%d].rules[%d]", i, j))
			if err != nil {
				return nil, err
			}
			rules[entry.Domain] = append(rules[entry.Domain], r)
			hasRules = true
		}
	}
	p := &vercel.NetworkPolicy{Allow: &vercel.NetworkAllow{Domains: domains}, Subnets: subnets(np.Subnets)}
	if hasRules {
		// Record form: every domain, one without rules as [] (null is no
		// rule list).
		for _, d := range domains {
			if rules[d] == nil {
				rules[d] = []vercel.NetworkRule{}
			}
		}
		p.Allow = &vercel.NetworkAllow{Rules: rules}
	}
	return p, nil
}

func subnets(s *sandboxv1.NetworkSubnets) *vercel.NetworkSubnets {
	if s == nil || (len(s.Allow) == 0 && len(s.Deny) == 0) {
		return nil
	}
	return &vercel.NetworkSubnets{Allow: s.Allow, Deny: s.Deny}
}

// networkRule translates one rule of domain; field is its path in the spec.
func networkRule(ctx context.Context, secrets *secretReader, domain string, r *sandboxv1.NetworkRule, field string) (vercel.NetworkRule, error) {
	var out vercel.NetworkRule
	if r.Match != nil {
		m, err := networkMatch(r.Match, field+".match")
		if err != nil {
			return out, err
		}
		out.Match = m
	}
	switch {
	case r.Transform != nil:
		headers, err := secretHeaders(ctx, secrets, r.Transform.Headers, func(name string) string {
			return fmt.Sprintf("the header %s set for %s (%s.transform)", name, domain, field)
		})
		if err != nil {
			return out, err
		}
		out.Transform = []vercel.NetworkTransform{{Headers: headers}}
	case r.ForwardURL != nil:
		u, err := forwardURL(ctx, secrets, r.ForwardURL.ValueFrom.SecretKeyRef, field+".forwardURL")
		if err != nil {
			return out, err
		}
		out.ForwardURL = u
	case r.Response != nil:
		out.Response = networkResponse(r.Response)
	}
	return out, nil
}

// forwardURL reads a forward URL from its Secret and checks what the API
// server cannot see: Vercel takes only an https URL without credentials,
// query or fragment. A bad value refuses the Secret; the message never
// quotes the value (it is a credential).
func forwardURL(ctx context.Context, secrets *secretReader, ref sandboxv1.SecretKeySelector, field string) (string, error) {
	v, err := secrets.value(ctx, ref.Name, ref.Key)
	if err != nil {
		return "", neededBy(err, field)
	}
	if problem := forwardURLProblem(v); problem != "" {
		return "", &secretError{name: ref.Name, refused: fmt.Sprintf("its key %q is not a URL %s takes: %s", ref.Key, field, problem)}
	}
	return v, nil
}

// forwardURLProblem says what is wrong with a forward URL, "" when
// nothing; never quoting it.
func forwardURLProblem(v string) string {
	if strings.ContainsAny(v, "?#") {
		return "it has a query or a fragment"
	}
	u, err := url.Parse(v)
	switch {
	case err != nil:
		// err quotes the URL: not reported.
		return "it does not parse as a URL"
	case u.Scheme != "https":
		return "its scheme is not https"
	case u.Host == "":
		return "it has no host"
	case u.User != nil:
		return "it carries credentials before the host"
	}
	return ""
}

// networkMatch translates a match, compiling each regex the way Vercel's
// proxy does (RE2, Go's regexp): CEL cannot.
func networkMatch(m *sandboxv1.NetworkMatch, field string) (*vercel.NetworkMatch, error) {
	out := &vercel.NetworkMatch{Method: m.Methods}
	var err error
	if out.Path, err = matcher(m.Path, field+".path"); err != nil {
		return nil, err
	}
	if out.Headers, err = keyValueMatchers(m.Headers, field+".headers"); err != nil {
		return nil, err
	}
	if out.QueryString, err = keyValueMatchers(m.QueryString, field+".queryString"); err != nil {
		return nil, err
	}
	return out, nil
}

func keyValueMatchers(kvs []sandboxv1.KeyValueMatcher, field string) ([]vercel.KeyValueMatcher, error) {
	var out []vercel.KeyValueMatcher
	for i, kv := range kvs {
		f := fmt.Sprintf("%s[%d]", field, i)
		k, err := matcher(kv.Key, f+".key")
		if err != nil {
			return nil, err
		}
		v, err := matcher(kv.Value, f+".value")
		if err != nil {
			return nil, err
		}
		out = append(out, vercel.KeyValueMatcher{Key: k, Value: v})
	}
	return out, nil
}

func matcher(m *sandboxv1.StringMatcher, field string) (*vercel.Matcher, error) {
	if m == nil {
		return nil, nil
	}
	if m.Regex != nil {
		if _, err := regexp.Compile(*m.Regex); err != nil {
			return nil, &policyError{field: field + ".regex", problem: "does not compile as an RE2 regular expression: " + strings.TrimPrefix(err.Error(), "error parsing regexp: ")}
		}
	}
	return &vercel.Matcher{Exact: m.Exact, StartsWith: m.StartsWith, Regex: m.Regex}, nil
}

func networkResponse(r *sandboxv1.NetworkResponse) *vercel.NetworkResponse {
	out := &vercel.NetworkResponse{StatusCode: int(r.StatusCode), Body: r.Body}
	if r.ContentType != nil {
		out.ContentType = *r.ContentType
	}
	if len(r.Headers) > 0 {
		out.Headers = make(map[string]string, len(r.Headers))
		for k, v := range r.Headers {
			out.Headers[k] = string(v)
		}
	}
	return out
}

func appendUnique(list []string, s string) []string {
	for _, x := range list {
		if x == s {
			return list
		}
	}
	return append(list, s)
}

// policySecret is one Secret a network policy references, the field that
// does, and how it is used.
type policySecret struct {
	name, field string
	use         secretUse
}

// policySecrets lists the Secrets np references, in spec order (a Secret
// may appear more than once).
func policySecrets(np *sandboxv1.NetworkPolicy) []policySecret {
	if np == nil {
		return nil
	}
	var out []policySecret
	for _, inj := range np.InjectHeaders {
		for _, h := range inj.Headers {
			out = append(out, policySecret{h.ValueFrom.SecretKeyRef.Name, "spec.networkPolicy.injectHeaders", useHeaders})
		}
	}
	for _, entry := range np.Allow {
		for _, r := range entry.Rules {
			if r.Transform != nil {
				for _, h := range r.Transform.Headers {
					out = append(out, policySecret{h.ValueFrom.SecretKeyRef.Name, "spec.networkPolicy.allow[].rules[].transform", useHeaders})
				}
			}
			if r.ForwardURL != nil {
				out = append(out, policySecret{r.ForwardURL.ValueFrom.SecretKeyRef.Name, "spec.networkPolicy.allow[].rules[].forwardURL", useForward})
			}
		}
	}
	return out
}
