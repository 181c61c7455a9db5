package v1alpha1

// The network policy of a sandbox: Vercel's model (its SDK 3.5
// NetworkPolicy; docs/dev/vercel-sandbox-api.md §3.6), with every value that
// is a credential read from a Secret. The CEL rules mirror the checks of
// Vercel's own request validator, so a policy Vercel would refuse is refused
// by the API server with a message naming the field. What CEL cannot check
// (an RE2 expression that does not compile, a forwardURL Secret whose value
// is not an https URL) the controller reports on the Synced condition.

// NetworkPolicy controls the sandbox's egress.
//
// In Allowlist mode the sandbox reaches the union of allowedDomains, the
// domains of injectHeaders and the domains of allow; a domain named in
// several of them is one entry. Its rules run in declaration order and the
// first that matches a request acts, so injectHeaders (a transform rule
// without match, which would claim every request) may not name a domain
// whose allow entry has rules: put the headers in a transform rule there,
// where their place in the order is explicit. subnets.allow adds
// address ranges reached whatever their name; subnets.deny wins over
// everything.
// +kubebuilder:validation:XValidation:rule="self.mode == 'Allowlist' || !has(self.allowedDomains)",message="spec.networkPolicy.allowedDomains is only allowed with mode Allowlist"
// +kubebuilder:validation:XValidation:rule="self.mode == 'Allowlist' || !has(self.allow)",message="spec.networkPolicy.allow is only allowed with mode Allowlist"
// +kubebuilder:validation:XValidation:rule="self.mode == 'Allowlist' || !has(self.subnets)",message="spec.networkPolicy.subnets is only allowed with mode Allowlist"
// +kubebuilder:validation:XValidation:rule="!has(self.injectHeaders) || !has(self.allow) || self.injectHeaders.all(i, !self.allow.exists(a, a.domain == i.domain && has(a.rules) && size(a.rules) > 0))",message="spec.networkPolicy.injectHeaders: a domain whose allow entry has rules takes its headers from a transform rule in spec.networkPolicy.allow[].rules (an injectHeaders transform would claim every request before those rules)"
type NetworkPolicy struct {
	// mode: AllowAll (full internet, the default), DenyAll (no egress), or
	// Allowlist (only the domains of allowedDomains, injectHeaders and allow,
	// and subnets.allow).
	// +optional
	// +kubebuilder:default=AllowAll
	Mode NetworkMode `json:"mode,omitempty"`
	// allowedDomains the sandbox may reach in Allowlist mode; a leading "*."
	// matches one or more labels ("*.github.com": api.github.com and
	// a.b.github.com, not github.com), "*" elsewhere exactly one. Shorthand for an allow entry without rules.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=256
	// +kubebuilder:validation:items:MaxLength=253
	// +kubebuilder:validation:items:Pattern=`^(\*\.)?[A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?(\.[A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?)*$`
	AllowedDomains []string `json:"allowedDomains,omitempty"`
	// injectHeaders adds HTTP headers to the sandbox's requests to a domain, with
	// values read from Secrets. The secret never enters the VM: Vercel's egress
	// proxy adds it. Shorthand for a transform rule without match, so not for
	// a domain whose allow entry has rules.
	// +optional
	// +listType=map
	// +listMapKey=domain
	// +kubebuilder:validation:MaxItems=64
	InjectHeaders []HeaderInjection `json:"injectHeaders,omitempty"`
	// allow lists domains the sandbox may reach in Allowlist mode, each with
	// the rules Vercel's egress proxy applies to its requests, in declaration
	// order. A domain without rules is simply allowed. Only with mode
	// Allowlist.
	// +optional
	// +listType=map
	// +listMapKey=domain
	// +kubebuilder:validation:MaxItems=32
	Allow []DomainRules `json:"allow,omitempty"`
	// subnets allows and denies address ranges (CIDR notation) in Allowlist
	// mode. Only with mode Allowlist.
	// +optional
	Subnets *NetworkSubnets `json:"subnets,omitempty"`
}

// HeaderInjection adds headers to requests for one domain.
type HeaderInjection struct {
	// domain the headers are added for.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^(\*\.)?[A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?(\.[A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?)*$`
	Domain string `json:"domain"`
	// headers to add, each with its value from a Secret. Names are unique,
	// ignoring case (HTTP header names are case-insensitive).
	// +required
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:XValidation:rule="self.all(h, self.filter(o, o.name.lowerAscii() == h.name.lowerAscii()).size() == 1)",message="header names must be unique, ignoring case"
	Headers []InjectedHeader `json:"headers"`
}

// InjectedHeader is one header whose value comes from a Secret.
type InjectedHeader struct {
	// name of the HTTP header (an RFC 7230 token, e.g. Authorization).
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:Pattern=`^[!#$%&'*+.^_|~0-9A-Za-z-]+$`
	Name string `json:"name"`
	// valueFrom selects the Secret key holding the header value.
	// +required
	ValueFrom EnvVarSource `json:"valueFrom"`
}

// DomainRules is one allowed domain and the rules for its requests.
type DomainRules struct {
	// domain the sandbox may reach; a leading "*." matches one or more labels
	// ("*.github.com": api.github.com and a.b.github.com, not github.com).
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^(\*\.)?[A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?(\.[A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?)*$`
	Domain string `json:"domain"`
	// rules applied to the domain's requests, in declaration order. A rule
	// without match applies to every request, so a trailing response rule
	// without match answers whatever the earlier rules did not claim (the way
	// to restrict an allowed domain to some paths). No rules: every request
	// to the domain passes unchanged.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=8
	Rules []NetworkRule `json:"rules,omitempty"`
}

// NetworkRule is one rule of an allowed domain: an optional match, and
// exactly one action.
// +kubebuilder:validation:XValidation:rule="[has(self.transform), has(self.forwardURL), has(self.response)].filter(x, x).size() == 1",message="spec.networkPolicy.allow[].rules[]: exactly one of transform, forwardURL, response"
type NetworkRule struct {
	// match limits the rule to the requests that match every dimension it
	// sets; without it the rule applies to every request to the domain.
	// +optional
	Match *NetworkMatch `json:"match,omitempty"`
	// transform sets headers on the matching requests, with values from
	// Secrets, before Vercel's proxy sends them on.
	// +optional
	Transform *NetworkTransform `json:"transform,omitempty"`
	// forwardURL sends the matching requests to an HTTPS proxy of yours
	// instead of the domain (Vercel adds a signed token identifying the
	// sandbox; @vercel/sandbox/proxy's defineSandboxProxy verifies it). The
	// URL is read from a Secret, since it often carries a credential of its
	// own; it must be https, without credentials, query or fragment (the
	// controller checks the value and reports a bad one on Synced, reason
	// SecretRefused).
	// +optional
	ForwardURL *ForwardURLSource `json:"forwardURL,omitempty"`
	// response answers the matching requests from Vercel's proxy, without
	// contacting the domain.
	// +optional
	Response *NetworkResponse `json:"response,omitempty"`
}

// NetworkMatch selects requests. Every dimension set must match: the
// methods are ORed, the header and query matchers ANDed.
// +kubebuilder:validation:XValidation:rule="has(self.path) || has(self.methods) || has(self.headers) || has(self.queryString)",message="spec.networkPolicy.allow[].rules[].match: set at least one of path, methods, headers, queryString (or leave match out)"
type NetworkMatch struct {
	// path matches the request path.
	// +optional
	Path *StringMatcher `json:"path,omitempty"`
	// methods the request may have (any of them), e.g. POST.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=32
	// +kubebuilder:validation:items:Pattern=`^[!#$%&'*+.^_|~0-9A-Za-z-]+$`
	Methods []string `json:"methods,omitempty"`
	// headers the request must have: every matcher must match one header.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=8
	Headers []KeyValueMatcher `json:"headers,omitempty"`
	// queryString entries the request must have: every matcher must match
	// one entry.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=8
	QueryString []KeyValueMatcher `json:"queryString,omitempty"`
}

// StringMatcher matches a value in exactly one way.
// +kubebuilder:validation:XValidation:rule="[has(self.exact), has(self.startsWith), has(self.regex)].filter(x, x).size() == 1",message="spec.networkPolicy.allow[].rules[].match: a matcher sets exactly one of exact, startsWith, regex"
type StringMatcher struct {
	// exact matches the value exactly.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Exact *string `json:"exact,omitempty"`
	// startsWith matches values that start with it.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	StartsWith *string `json:"startsWith,omitempty"`
	// regex matches values against an RE2 regular expression (Go's regexp
	// syntax). One that does not compile is reported on Synced, reason
	// NetworkPolicyInvalid, naming the field.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	Regex *string `json:"regex,omitempty"`
}

// KeyValueMatcher matches one header or query-string entry, by its key,
// its value or both.
// +kubebuilder:validation:XValidation:rule="has(self.key) || has(self.value)",message="spec.networkPolicy.allow[].rules[].match: a header or queryString matcher sets key, value or both"
type KeyValueMatcher struct {
	// key matches the entry's name.
	// +optional
	Key *StringMatcher `json:"key,omitempty"`
	// value matches the entry's value.
	// +optional
	Value *StringMatcher `json:"value,omitempty"`
}

// NetworkTransform sets headers on a request.
type NetworkTransform struct {
	// headers to set, each with its value from a Secret. Names are unique,
	// ignoring case.
	// +required
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=8
	// +kubebuilder:validation:XValidation:rule="self.all(h, self.filter(o, o.name.lowerAscii() == h.name.lowerAscii()).size() == 1)",message="spec.networkPolicy.allow[].rules[].transform.headers: names must be unique, ignoring case"
	Headers []InjectedHeader `json:"headers"`
}

// ForwardURLSource is where a forwardURL comes from: a Secret only.
type ForwardURLSource struct {
	// valueFrom selects the Secret key holding the URL.
	// +required
	ValueFrom EnvVarSource `json:"valueFrom"`
}

// HeaderValue is the value of a response header.
// +kubebuilder:validation:MaxLength=4096
type HeaderValue string

// NetworkResponse is an answer Vercel's proxy gives itself.
// +kubebuilder:validation:XValidation:rule="!has(self.body) || has(self.contentType)",message="spec.networkPolicy.allow[].rules[].response: contentType is required when body is set"
// +kubebuilder:validation:XValidation:rule="!has(self.body) || !(self.statusCode in [204, 205, 304])",message="spec.networkPolicy.allow[].rules[].response: body is not allowed on status codes 204, 205 and 304"
type NetworkResponse struct {
	// statusCode of the answer, 200 to 599 (403 to deny).
	// +required
	// +kubebuilder:validation:Minimum=200
	// +kubebuilder:validation:Maximum=599
	StatusCode int32 `json:"statusCode"`
	// headers of the answer. Connection, Content-Length and
	// Transfer-Encoding are the proxy's and cannot be set; names are unique,
	// ignoring case.
	// +optional
	// +kubebuilder:validation:MaxProperties=8
	// +kubebuilder:validation:XValidation:rule="self.all(k, size(k) <= 256 && k.matches('^[!#$%&\\'*+.^_|~0-9A-Za-z-]+$'))",message="spec.networkPolicy.allow[].rules[].response.headers: each name must be an HTTP header name (at most 256 characters)"
	// +kubebuilder:validation:XValidation:rule="self.all(k, !(k.lowerAscii() in ['connection', 'content-length', 'transfer-encoding']))",message="spec.networkPolicy.allow[].rules[].response.headers: connection, content-length and transfer-encoding are managed by the proxy"
	// +kubebuilder:validation:XValidation:rule="self.all(k, self.filter(o, o.lowerAscii() == k.lowerAscii()).size() == 1)",message="spec.networkPolicy.allow[].rules[].response.headers: names must be unique, ignoring case"
	Headers map[string]HeaderValue `json:"headers,omitempty"`
	// body of the answer; requires contentType.
	// +optional
	// +kubebuilder:validation:MaxLength=16384
	Body *string `json:"body,omitempty"`
	// contentType of body, e.g. application/json.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	ContentType *string `json:"contentType,omitempty"`
}

// NetworkSubnets allows and denies address ranges.
type NetworkSubnets struct {
	// allow lists ranges the sandbox may reach whatever their name (they
	// bypass the domain list), e.g. 10.0.0.0/8.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=49
	// +kubebuilder:validation:XValidation:rule="self.all(c, isCIDR(c))",message="spec.networkPolicy.subnets.allow: each entry must be a CIDR range such as 10.0.0.0/8"
	Allow []string `json:"allow,omitempty"`
	// deny lists ranges the sandbox may never reach: they win over every
	// allowed domain and range.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=49
	// +kubebuilder:validation:XValidation:rule="self.all(c, isCIDR(c))",message="spec.networkPolicy.subnets.deny: each entry must be a CIDR range such as 10.0.0.0/8"
	Deny []string `json:"deny,omitempty"`
}
