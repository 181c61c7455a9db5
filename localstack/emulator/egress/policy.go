package egress

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"sort"
	"strings"
)

// This file turns a network policy in request form A (mode) or B
// (allow/subnets) into the tables the proxy consults per request
// (docs/dev/vercel-sandbox-api.md §3.6). The JSON has passed the emulator's
// validator; Compile still refuses what it cannot enforce, so a policy the
// proxy does not understand fails closed instead of allowing traffic.

type mode int

const (
	modeAllowAll mode = iota
	modeDenyAll
	modeCustom
)

// Policy is a compiled network policy. The zero value is not useful; use
// Compile. A Policy is immutable and safe for concurrent use.
type Policy struct {
	mode mode
	// unmatchedAllowed is form A's "default-allow": hosts no domain names
	// are allowed too (Vercel does not document it; this is our reading).
	unmatchedAllowed bool
	domains          []*domain // most specific first
	allowCIDRs       []netip.Prefix
	denyCIDRs        []netip.Prefix
}

// Mode names the policy's kind for logs: allow-all, deny-all or custom.
func (p *Policy) Mode() string {
	switch {
	case p == nil || p.mode == modeDenyAll:
		return "deny-all"
	case p.mode == modeAllowAll:
		return "allow-all"
	}
	return "custom"
}

// domain is one allowed domain pattern with its L7 rules in declaration order.
type domain struct {
	pattern string
	labels  []string // lower-case, "*" = wildcard label
	rules   []*rule
}

type ruleKind int

const (
	kindTransform ruleKind = iota
	kindForward
	kindResponse
)

func (k ruleKind) String() string {
	return [...]string{"transform", "forwardURL", "response"}[k]
}

type rule struct {
	match     *match
	kind      ruleKind
	transform []map[string]string // applied in order; later lists override
	forward   *url.URL
	response  *cannedResponse
}

type cannedResponse struct {
	status      int
	headers     map[string]string
	body        *string
	contentType *string
}

// JSON shapes of §3.6 (lenient decoding: the emulator already validated).
type matcherJSON struct {
	Exact      *string `json:"exact"`
	StartsWith *string `json:"startsWith"`
	Regex      *string `json:"regex"`
}

type kvMatcherJSON struct {
	Key   *matcherJSON `json:"key"`
	Value *matcherJSON `json:"value"`
}

type matchJSON struct {
	Path        *matcherJSON    `json:"path"`
	Method      []string        `json:"method"`
	QueryString []kvMatcherJSON `json:"queryString"`
	Headers     []kvMatcherJSON `json:"headers"`
}

type ruleJSON struct {
	Match     *matchJSON `json:"match"`
	Transform []struct {
		Headers map[string]string `json:"headers"`
	} `json:"transform"`
	ForwardURL *string `json:"forwardURL"`
	Response   *struct {
		StatusCode  int               `json:"statusCode"`
		Headers     map[string]string `json:"headers"`
		Body        *string           `json:"body"`
		ContentType *string           `json:"contentType"`
	} `json:"response"`
}

type formA struct {
	Mode           *string  `json:"mode"`
	AllowedDomains []string `json:"allowedDomains"`
	AllowedCIDRs   []string `json:"allowedCIDRs"`
	DeniedCIDRs    []string `json:"deniedCIDRs"`
	InjectionRules []struct {
		Domain  string            `json:"domain"`
		Headers map[string]string `json:"headers"`
		Match   *matchJSON        `json:"match"`
	} `json:"injectionRules"`
	ForwardRules []struct {
		Domain     string     `json:"domain"`
		ForwardURL string     `json:"forwardURL"`
		Match      *matchJSON `json:"match"`
	} `json:"forwardRules"`
}

type formB struct {
	Allow   json.RawMessage `json:"allow"`
	Subnets *struct {
		Allow []string `json:"allow"`
		Deny  []string `json:"deny"`
	} `json:"subnets"`
}

// Compile parses a validated network policy in request form A or B
// (nil/empty/null = allow-all). An empty object is form B with nothing
// allowed: Vercel denies what a custom policy does not allow.
func Compile(raw json.RawMessage) (*Policy, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return &Policy{mode: modeAllowAll}, nil
	}
	var keys map[string]json.RawMessage
	if err := json.Unmarshal(raw, &keys); err != nil {
		return nil, fmt.Errorf("networkPolicy: should be an object: %w", err)
	}
	if _, ok := keys["mode"]; ok {
		var a formA
		if err := json.Unmarshal(raw, &a); err != nil {
			return nil, fmt.Errorf("networkPolicy: %w", err)
		}
		return compileA(&a)
	}
	var b formB
	if err := json.Unmarshal(raw, &b); err != nil {
		return nil, fmt.Errorf("networkPolicy: %w", err)
	}
	return compileB(&b)
}

func compileA(a *formA) (*Policy, error) {
	p := &Policy{mode: modeCustom}
	switch *a.Mode {
	case "allow-all":
		return &Policy{mode: modeAllowAll}, nil
	case "deny-all":
		return &Policy{mode: modeDenyAll}, nil
	case "default-allow":
		p.unmatchedAllowed = true
	case "custom", "default-deny":
	default:
		return nil, fmt.Errorf("networkPolicy.mode: unknown mode %q", *a.Mode)
	}
	b := newBuilder()
	for i, d := range a.AllowedDomains {
		if err := b.add(d, fmt.Sprintf("networkPolicy.allowedDomains[%d]", i)); err != nil {
			return nil, err
		}
	}
	if err := addFormARules(b, a); err != nil {
		return nil, err
	}
	var err error
	if p.allowCIDRs, err = compileCIDRs(a.AllowedCIDRs, "networkPolicy.allowedCIDRs"); err != nil {
		return nil, err
	}
	if p.denyCIDRs, err = compileCIDRs(a.DeniedCIDRs, "networkPolicy.deniedCIDRs"); err != nil {
		return nil, err
	}
	p.domains = b.done()
	return p, nil
}

// addFormARules adds injectionRules (transforms) and forwardRules.
func addFormARules(b *builder, a *formA) error {
	for i, ir := range a.InjectionRules {
		f := fmt.Sprintf("networkPolicy.injectionRules[%d]", i)
		if err := b.add(ir.Domain, f+".domain"); err != nil {
			return err
		}
		m, err := compileMatch(ir.Match, f+".match")
		if err != nil {
			return err
		}
		b.rule(ir.Domain, &rule{match: m, kind: kindTransform, transform: []map[string]string{ir.Headers}})
	}
	for i, fr := range a.ForwardRules {
		f := fmt.Sprintf("networkPolicy.forwardRules[%d]", i)
		if err := b.add(fr.Domain, f+".domain"); err != nil {
			return err
		}
		r, err := compileRule(&ruleJSON{Match: fr.Match, ForwardURL: &fr.ForwardURL}, f)
		if err != nil {
			return err
		}
		b.rule(fr.Domain, r)
	}
	return nil
}

func compileB(fb *formB) (*Policy, error) {
	p := &Policy{mode: modeCustom}
	b := newBuilder()
	if err := addAllow(b, bytes.TrimSpace(fb.Allow)); err != nil {
		return nil, err
	}
	if fb.Subnets != nil {
		var err error
		if p.allowCIDRs, err = compileCIDRs(fb.Subnets.Allow, "networkPolicy.subnets.allow"); err != nil {
			return nil, err
		}
		if p.denyCIDRs, err = compileCIDRs(fb.Subnets.Deny, "networkPolicy.subnets.deny"); err != nil {
			return nil, err
		}
	}
	p.domains = b.done()
	return p, nil
}

// addAllow adds form B's allow: a list of domains, or domains with rules.
func addAllow(b *builder, allow json.RawMessage) error {
	switch {
	case len(allow) == 0 || bytes.Equal(allow, []byte("null")):
		return nil
	case allow[0] == '[':
		var list []string
		if err := json.Unmarshal(allow, &list); err != nil {
			return fmt.Errorf("networkPolicy.allow: %w", err)
		}
		for i, d := range list {
			if err := b.add(d, fmt.Sprintf("networkPolicy.allow[%d]", i)); err != nil {
				return err
			}
		}
		return nil
	}
	var rec map[string][]ruleJSON
	if err := json.Unmarshal(allow, &rec); err != nil {
		return fmt.Errorf("networkPolicy.allow: %w", err)
	}
	for d, rules := range rec {
		if err := b.add(d, "networkPolicy.allow."+d); err != nil {
			return err
		}
		for i := range rules {
			r, err := compileRule(&rules[i], fmt.Sprintf("networkPolicy.allow.%s[%d]", d, i))
			if err != nil {
				return err
			}
			b.rule(d, r)
		}
	}
	return nil
}

// builder collects domains by pattern, keeping each domain's rules in
// declaration order.
type builder struct{ byPattern map[string]*domain }

func newBuilder() *builder { return &builder{byPattern: map[string]*domain{}} }

func (b *builder) add(pattern, field string) error {
	p := normalizeHost(pattern)
	if p == "" || strings.ContainsAny(p, " /:") {
		return fmt.Errorf("%s: %q is not a domain name", field, pattern)
	}
	if _, ok := b.byPattern[p]; !ok {
		b.byPattern[p] = &domain{pattern: p, labels: strings.Split(p, ".")}
	}
	return nil
}

func (b *builder) rule(pattern string, r *rule) {
	d := b.byPattern[normalizeHost(pattern)]
	d.rules = append(d.rules, r)
}

// done orders domains most specific first, so a host matching both
// "api.example.com" and "*.example.com" (or "*") gets the exact domain's
// rules: more labels first, then fewer wildcards, then by name for
// determinism (JSON objects carry no order Go keeps).
func (b *builder) done() []*domain {
	out := make([]*domain, 0, len(b.byPattern))
	for _, d := range b.byPattern {
		out = append(out, d)
	}
	wild := func(d *domain) int { return strings.Count(d.pattern, "*") }
	sort.Slice(out, func(i, j int) bool {
		if len(out[i].labels) != len(out[j].labels) {
			return len(out[i].labels) > len(out[j].labels)
		}
		if wild(out[i]) != wild(out[j]) {
			return wild(out[i]) < wild(out[j])
		}
		return out[i].pattern < out[j].pattern
	})
	return out
}

func compileCIDRs(list []string, field string) ([]netip.Prefix, error) {
	out := make([]netip.Prefix, 0, len(list))
	for i, c := range list {
		if p, err := netip.ParsePrefix(c); err == nil {
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(c)
		if err != nil {
			return nil, fmt.Errorf("%s[%d]: %q is not a CIDR range", field, i, c)
		}
		out = append(out, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
	}
	return out, nil
}

func compileRule(r *ruleJSON, field string) (*rule, error) {
	m, err := compileMatch(r.Match, field+".match")
	if err != nil {
		return nil, err
	}
	out := &rule{match: m}
	switch {
	case r.Transform != nil:
		out.kind = kindTransform
		for _, t := range r.Transform {
			out.transform = append(out.transform, t.Headers)
		}
	case r.ForwardURL != nil:
		u, err := parseForwardURL(*r.ForwardURL, field+".forwardURL")
		if err != nil {
			return nil, err
		}
		out.kind, out.forward = kindForward, u
	case r.Response != nil:
		if r.Response.StatusCode < 200 || r.Response.StatusCode > 599 {
			return nil, fmt.Errorf("%s.response.statusCode: must be between 200 and 599", field)
		}
		out.kind = kindResponse
		out.response = &cannedResponse{status: r.Response.StatusCode, headers: r.Response.Headers,
			body: r.Response.Body, contentType: r.Response.ContentType}
	default:
		return nil, fmt.Errorf("%s: must have one of transform, forwardURL, response", field)
	}
	return out, nil
}

// parseForwardURL checks what Vercel requires of a forward URL: https,
// without credentials, query or fragment. The error never quotes the URL,
// which may carry a token.
func parseForwardURL(raw, field string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "https" || u.Host == "" || u.User != nil || strings.ContainsAny(raw, "?#") {
		return nil, fmt.Errorf("%s: must be an https URL without credentials, query or fragment", field)
	}
	return u, nil
}

// normalizeHost lower-cases a host name and drops a trailing dot.
func normalizeHost(h string) string {
	return strings.TrimSuffix(strings.ToLower(strings.TrimSpace(h)), ".")
}

// matchDomain reports whether host (normalized, not an IP literal) matches
// pattern labels. Per Vercel's CLI docs, "*" stands for one label, except as
// the first label, where it stands for any (non-empty) run of subdomains:
// "*.example.com" matches a.example.com and a.b.example.com, not
// example.com; bare "*" matches every name.
func matchDomain(labels []string, host string) bool {
	hl := strings.Split(host, ".")
	if labels[0] == "*" {
		rest := labels[1:]
		if len(hl) <= len(rest) {
			return false
		}
		return labelsEqual(rest, hl[len(hl)-len(rest):])
	}
	return len(hl) == len(labels) && labelsEqual(labels, hl)
}

func labelsEqual(pattern, host []string) bool {
	for i := range pattern {
		if pattern[i] != "*" && pattern[i] != host[i] {
			return false
		}
		if host[i] == "" {
			return false
		}
	}
	return true
}

// domainFor returns the most specific allowed domain matching host, or nil.
func (p *Policy) domainFor(host string) *domain {
	for _, d := range p.domains {
		if matchDomain(d.labels, host) {
			return d
		}
	}
	return nil
}

// hasRules reports whether requests to the domain need the proxy to read
// them (TLS termination for https).
func (d *domain) hasRules() bool { return d != nil && len(d.rules) > 0 }

// firstRule returns the first rule whose match accepts r, or nil.
func (d *domain) firstRule(r *http.Request) (int, *rule) {
	for i, rl := range d.rules {
		if rl.match.matches(r) {
			return i, rl
		}
	}
	return -1, nil
}
