package emulator

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/netip"
	"net/url"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/getsentry/sandbox-controller/internal/vercel"
)

// This file validates network policies, in both request forms, and computes
// the redacted form the API answers with (docs/dev/vercel-sandbox-api.md §3.6:
// forms A and B in requests, form C in answers).

// policySpec is a stored network policy: the request as given, and the
// redacted response form computed from it.
type policySpec struct {
	raw  json.RawMessage
	resp vercel.NetworkPolicy
}

// response returns the answer form C (nil policy = allow-all).
func (p *policySpec) response() *vercel.NetworkPolicy {
	if p == nil {
		return &vercel.NetworkPolicy{Mode: vercel.NetworkAllowAll}
	}
	r := p.resp
	return &r
}

type policyA struct {
	Mode           *string  `json:"mode"`
	AllowedDomains []string `json:"allowedDomains"`
	AllowedCIDRs   []string `json:"allowedCIDRs"`
	DeniedCIDRs    []string `json:"deniedCIDRs"`
	InjectionRules []struct {
		Domain  *string           `json:"domain"`
		Headers map[string]string `json:"headers"`
		Match   json.RawMessage   `json:"match"`
	} `json:"injectionRules"`
}

type policyB struct {
	Allow   json.RawMessage `json:"allow"`
	Subnets *struct {
		Allow []string `json:"allow"`
		Deny  []string `json:"deny"`
	} `json:"subnets"`
}

type matcherBody struct {
	Exact      *string `json:"exact"`
	StartsWith *string `json:"startsWith"`
	Regex      *string `json:"regex"`
}

type kvMatcherBody struct {
	Key   *matcherBody `json:"key"`
	Value *matcherBody `json:"value"`
}

type matchBody struct {
	Path        *matcherBody    `json:"path"`
	Method      []string        `json:"method"`
	QueryString []kvMatcherBody `json:"queryString"`
	Headers     []kvMatcherBody `json:"headers"`
}

type ruleBody struct {
	Match     json.RawMessage `json:"match"`
	Transform []struct {
		Headers map[string]string `json:"headers"`
	} `json:"transform"`
	ForwardURL *string `json:"forwardURL"`
	Response   *struct {
		StatusCode  *int              `json:"statusCode"`
		Headers     map[string]string `json:"headers"`
		Body        *string           `json:"body"`
		ContentType *string           `json:"contentType"`
	} `json:"response"`
}

func strictInto(raw json.RawMessage, field string, dst any) *apiError {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		ae := jsonError(err)
		if strings.Contains(ae.message, "`") {
			ae.message = strings.Replace(ae.message, "`", "`"+field+".", 1)
		} else {
			ae.message = fmt.Sprintf("Invalid request: `%s` should be object.", field)
		}
		return ae
	}
	return nil
}

func checkMatch(raw json.RawMessage, field string) *apiError {
	if len(raw) == 0 || isNull(raw) {
		return nil
	}
	var m matchBody
	if err := strictInto(raw, field, &m); err != nil {
		return err
	}
	check := func(mb *matcherBody, f string) *apiError {
		if mb == nil {
			return nil
		}
		if mb.Regex != nil {
			if _, err := regexp.Compile(*mb.Regex); err != nil {
				return invalid(f+".regex", "is not a valid regular expression")
			}
		}
		return nil
	}
	if err := check(m.Path, field+".path"); err != nil {
		return err
	}
	for i, kv := range m.QueryString {
		if err := check(kv.Key, fmt.Sprintf("%s.queryString[%d].key", field, i)); err != nil {
			return err
		}
		if err := check(kv.Value, fmt.Sprintf("%s.queryString[%d].value", field, i)); err != nil {
			return err
		}
	}
	for i, kv := range m.Headers {
		if err := check(kv.Key, fmt.Sprintf("%s.headers[%d].key", field, i)); err != nil {
			return err
		}
		if err := check(kv.Value, fmt.Sprintf("%s.headers[%d].value", field, i)); err != nil {
			return err
		}
	}
	return nil
}

func checkCIDRs(field string, cidrs []string) *apiError {
	for i, c := range cidrs {
		if _, err := netip.ParsePrefix(c); err != nil {
			if _, err2 := netip.ParseAddr(c); err2 != nil {
				return invalid(fmt.Sprintf("%s[%d]", field, i), "should be a CIDR range (got %q)", c)
			}
		}
	}
	return nil
}

func checkDomains(field string, domains []string) *apiError {
	for i, d := range domains {
		if d == "" || strings.ContainsAny(d, " /:") {
			return invalid(fmt.Sprintf("%s[%d]", field, i), "should be a domain name (got %q)", d)
		}
	}
	return nil
}

func headerNames(h map[string]string) []string {
	names := make([]string, 0, len(h))
	for k := range h {
		names = append(names, k)
	}
	sort.Strings(names)
	return names
}

// parsePolicy validates a network policy in the mode form (A) or the
// allow/subnets form (B) and computes its answer form (C).
// A missing or null policy returns nil.
func parsePolicy(raw json.RawMessage) (*policySpec, *apiError) {
	if len(raw) == 0 || isNull(raw) {
		return nil, nil
	}
	var keys map[string]json.RawMessage
	if err := json.Unmarshal(raw, &keys); err != nil {
		return nil, invalid("networkPolicy", "should be object")
	}
	_, hasMode := keys["mode"]
	_, hasAllow := keys["allow"]
	_, hasSubnets := keys["subnets"]
	spec := &policySpec{raw: append(json.RawMessage(nil), raw...)}
	if hasMode && (hasAllow || hasSubnets) {
		return nil, badRequest("Invalid request: `networkPolicy` must use either `mode` or `allow`/`subnets`, not both.")
	}
	if hasMode || (!hasAllow && !hasSubnets && len(keys) > 0) {
		var a policyA
		if err := strictInto(raw, "networkPolicy", &a); err != nil {
			return nil, err
		}
		if a.Mode == nil {
			return nil, invalid("networkPolicy", "should have required property 'mode'")
		}
		switch *a.Mode {
		case vercel.NetworkAllowAll, vercel.NetworkDenyAll:
			spec.resp = vercel.NetworkPolicy{Mode: *a.Mode}
			return spec, nil
		case vercel.NetworkCustom, "default-allow", "default-deny":
		default:
			return nil, invalid("networkPolicy.mode", "should be equal to one of the allowed values: allow-all, deny-all, custom, default-allow, default-deny")
		}
		if err := checkDomains("networkPolicy.allowedDomains", a.AllowedDomains); err != nil {
			return nil, err
		}
		if err := checkCIDRs("networkPolicy.allowedCIDRs", a.AllowedCIDRs); err != nil {
			return nil, err
		}
		if err := checkCIDRs("networkPolicy.deniedCIDRs", a.DeniedCIDRs); err != nil {
			return nil, err
		}
		resp := vercel.NetworkPolicy{Mode: vercel.NetworkCustom, AllowedDomains: a.AllowedDomains,
			AllowedCIDRs: a.AllowedCIDRs, DeniedCIDRs: a.DeniedCIDRs}
		for i, r := range a.InjectionRules {
			f := fmt.Sprintf("networkPolicy.injectionRules[%d]", i)
			if r.Domain == nil || *r.Domain == "" {
				return nil, invalid(f, "should have required property 'domain'")
			}
			if err := checkMatch(r.Match, f+".match"); err != nil {
				return nil, err
			}
			resp.InjectionRules = append(resp.InjectionRules, vercel.InjectionRule{
				Domain: *r.Domain, HeaderNames: headerNames(r.Headers), Match: r.Match})
		}
		spec.resp = resp
		return spec, nil
	}
	var b policyB
	if err := strictInto(raw, "networkPolicy", &b); err != nil {
		return nil, err
	}
	resp := vercel.NetworkPolicy{Mode: vercel.NetworkCustom}
	if len(b.Allow) > 0 && !isNull(b.Allow) {
		trimmed := bytes.TrimSpace(b.Allow)
		switch trimmed[0] {
		case '[':
			var list []string
			if err := json.Unmarshal(b.Allow, &list); err != nil {
				return nil, invalid("networkPolicy.allow", "should be array of strings or object")
			}
			if err := checkDomains("networkPolicy.allow", list); err != nil {
				return nil, err
			}
			resp.AllowedDomains = list
		case '{':
			var m map[string][]json.RawMessage
			if err := json.Unmarshal(b.Allow, &m); err != nil {
				return nil, invalid("networkPolicy.allow", "should be array of strings or object whose values are arrays of rules")
			}
			domains := make([]string, 0, len(m))
			for d := range m {
				domains = append(domains, d)
			}
			sort.Strings(domains)
			if err := checkDomains("networkPolicy.allow", domains); err != nil {
				return nil, err
			}
			resp.AllowedDomains = domains
			for _, d := range domains {
				for i, rr := range m[d] {
					f := fmt.Sprintf("networkPolicy.allow.%s[%d]", d, i)
					inj, fwd, err := checkRule(rr, f, d)
					if err != nil {
						return nil, err
					}
					if inj != nil {
						resp.InjectionRules = append(resp.InjectionRules, *inj)
					}
					if fwd != nil {
						resp.ForwardRules = append(resp.ForwardRules, *fwd)
					}
				}
			}
		default:
			return nil, invalid("networkPolicy.allow", "should be array of strings or object")
		}
	}
	if b.Subnets != nil {
		if err := checkCIDRs("networkPolicy.subnets.allow", b.Subnets.Allow); err != nil {
			return nil, err
		}
		if err := checkCIDRs("networkPolicy.subnets.deny", b.Subnets.Deny); err != nil {
			return nil, err
		}
		resp.AllowedCIDRs, resp.DeniedCIDRs = b.Subnets.Allow, b.Subnets.Deny
	}
	spec.resp = resp
	return spec, nil
}

var forbiddenResponseHeaders = []string{"connection", "content-length", "transfer-encoding"}

func checkRule(raw json.RawMessage, f, domain string) (*vercel.InjectionRule, *vercel.ForwardRule, *apiError) {
	var r ruleBody
	if err := strictInto(raw, f, &r); err != nil {
		return nil, nil, err
	}
	if err := checkMatch(r.Match, f+".match"); err != nil {
		return nil, nil, err
	}
	n := 0
	if r.Transform != nil {
		n++
	}
	if r.ForwardURL != nil {
		n++
	}
	if r.Response != nil {
		n++
	}
	if n != 1 {
		return nil, nil, invalid(f, "must have exactly one of `transform`, `forwardURL`, `response`")
	}
	switch {
	case r.Transform != nil:
		var names []string
		seen := map[string]bool{}
		for _, t := range r.Transform {
			for _, h := range headerNames(t.Headers) {
				if seen[strings.ToLower(h)] {
					return nil, nil, invalid(f+".transform", "has duplicate header name %q", h)
				}
				seen[strings.ToLower(h)] = true
				names = append(names, h)
			}
		}
		return &vercel.InjectionRule{Domain: domain, HeaderNames: names, Match: r.Match}, nil, nil
	case r.ForwardURL != nil:
		u, err := url.Parse(*r.ForwardURL)
		if err != nil || u.Scheme == "" || u.Host == "" {
			return nil, nil, invalid(f+".forwardURL", "should match format \"uri\"")
		}
		if u.Scheme != "https" { // the SDK's contract: an HTTPS proxy URL
			return nil, nil, invalid(f+".forwardURL", "must be an https URL")
		}
		if u.User != nil || u.RawQuery != "" || u.Fragment != "" || strings.Contains(*r.ForwardURL, "?") || strings.Contains(*r.ForwardURL, "#") {
			return nil, nil, invalid(f+".forwardURL", "must not contain credentials, a query or a fragment")
		}
		return nil, &vercel.ForwardRule{Domain: domain, ForwardURL: *r.ForwardURL, Match: r.Match}, nil
	default:
		resp := r.Response
		if resp.StatusCode == nil {
			return nil, nil, invalid(f+".response", "should have required property 'statusCode'")
		}
		if *resp.StatusCode < 200 || *resp.StatusCode > 599 {
			return nil, nil, invalid(f+".response.statusCode", "should be >= 200 and <= 599")
		}
		if resp.Body != nil {
			if resp.ContentType == nil {
				return nil, nil, invalid(f+".response", "`contentType` is required when `body` is set")
			}
			switch *resp.StatusCode {
			case 204, 205, 304:
				return nil, nil, invalid(f+".response.body", "must not be set for status %d", *resp.StatusCode)
			}
		}
		seen := map[string]bool{}
		for _, h := range headerNames(resp.Headers) {
			l := strings.ToLower(h)
			if slices.Contains(forbiddenResponseHeaders, l) {
				return nil, nil, invalid(f+".response.headers", "must not set %q", h)
			}
			if seen[l] {
				return nil, nil, invalid(f+".response.headers", "has duplicate header name %q", h)
			}
			seen[l] = true
		}
		return nil, nil, nil
	}
}

// InjectedHeaders returns the headers the network policy of session id
// injects, by domain, with their values: what Vercel's egress proxy would add
// to the session's requests. The API never answers with the values (form C);
// this lets a test see that a rotated value reached the session. False when
// the session is unknown.
func (e *Emulator) InjectedHeaders(id string) (map[string]map[string]string, bool) {
	e.mu.Lock()
	defer e.unlock()
	s, ok := e.st.sessions[id]
	if !ok {
		return nil, false
	}
	return s.policy.injectedHeaders(), true
}

// injectedHeaders reads the header values of a mode-form policy's injection
// rules, and of an allow-form policy's transform rules.
func (p *policySpec) injectedHeaders() map[string]map[string]string {
	out := map[string]map[string]string{}
	if p == nil {
		return out
	}
	add := func(domain string, h map[string]string) {
		if len(h) == 0 {
			return
		}
		if out[domain] == nil {
			out[domain] = map[string]string{}
		}
		for k, v := range h {
			out[domain][k] = v
		}
	}
	var a policyA
	if json.Unmarshal(p.raw, &a) == nil && a.Mode != nil {
		for _, r := range a.InjectionRules {
			if r.Domain != nil {
				add(*r.Domain, r.Headers)
			}
		}
		return out
	}
	var b struct {
		Allow map[string][]ruleBody `json:"allow"`
	}
	if json.Unmarshal(p.raw, &b) == nil {
		for d, rules := range b.Allow {
			for _, r := range rules {
				for _, t := range r.Transform {
					add(d, t.Headers)
				}
			}
		}
	}
	return out
}
