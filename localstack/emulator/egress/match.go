package egress

import (
	"fmt"
	"net/http"
	"regexp"
	"strings"
)

// This file evaluates a rule's `match` against a request (SDK
// NetworkPolicyMatch): every given dimension must match; methods are ORed,
// header and query matchers ANDed.

// matcher is one NetworkPolicyMatcher. Several of exact/startsWith/regex in
// one matcher must all hold (the SDK types allow one; the validator accepts
// several). Regexes are RE2 (Go's regexp) and unanchored, like RE2's
// PartialMatch: anchor with ^ and $ to match a whole value.
type matcher struct {
	exact, prefix *string
	re            *regexp.Regexp
}

type kvMatcher struct{ key, value *matcher }

type match struct {
	path    *matcher
	methods []string
	query   []kvMatcher
	headers []kvMatcher
}

func compileMatcher(m *matcherJSON, field string) (*matcher, error) {
	if m == nil {
		return nil, nil
	}
	out := &matcher{exact: m.Exact, prefix: m.StartsWith}
	if m.Regex != nil {
		re, err := regexp.Compile(*m.Regex)
		if err != nil {
			return nil, fmt.Errorf("%s.regex: is not a valid RE2 regular expression", field)
		}
		out.re = re
	}
	return out, nil
}

func compileKV(list []kvMatcherJSON, field string) ([]kvMatcher, error) {
	out := make([]kvMatcher, 0, len(list))
	for i, kv := range list {
		k, err := compileMatcher(kv.Key, fmt.Sprintf("%s[%d].key", field, i))
		if err != nil {
			return nil, err
		}
		v, err := compileMatcher(kv.Value, fmt.Sprintf("%s[%d].value", field, i))
		if err != nil {
			return nil, err
		}
		out = append(out, kvMatcher{key: k, value: v})
	}
	return out, nil
}

func compileMatch(m *matchJSON, field string) (*match, error) {
	if m == nil {
		return nil, nil
	}
	path, err := compileMatcher(m.Path, field+".path")
	if err != nil {
		return nil, err
	}
	q, err := compileKV(m.QueryString, field+".queryString")
	if err != nil {
		return nil, err
	}
	h, err := compileKV(m.Headers, field+".headers")
	if err != nil {
		return nil, err
	}
	return &match{path: path, methods: m.Method, query: q, headers: h}, nil
}

// test reports whether s satisfies the matcher (nil matches anything).
func (m *matcher) test(s string) bool {
	if m == nil {
		return true
	}
	if m.exact != nil && s != *m.exact {
		return false
	}
	if m.prefix != nil && !strings.HasPrefix(s, *m.prefix) {
		return false
	}
	return m.re == nil || m.re.MatchString(s)
}

// testKey matches a header name: names are case-insensitive, so exact and
// prefix compare without case and a regex sees the lower-case name.
func (m *matcher) testKey(name string) bool {
	if m == nil {
		return true
	}
	l := strings.ToLower(name)
	if m.exact != nil && !strings.EqualFold(name, *m.exact) {
		return false
	}
	if m.prefix != nil && !strings.HasPrefix(l, strings.ToLower(*m.prefix)) {
		return false
	}
	return m.re == nil || m.re.MatchString(l)
}

// anyEntry reports whether one (key, value) entry satisfies kv.
func anyEntry(entries map[string][]string, kv kvMatcher, header bool) bool {
	for k, vs := range entries {
		keyOK := kv.key.test(k)
		if header {
			keyOK = kv.key.testKey(k)
		}
		if !keyOK {
			continue
		}
		for _, v := range vs {
			if kv.value.test(v) {
				return true
			}
		}
	}
	return false
}

// matches reports whether r satisfies m (nil matches every request).
func (m *match) matches(r *http.Request) bool {
	if m == nil {
		return true
	}
	if !m.path.test(r.URL.Path) {
		return false
	}
	if len(m.methods) > 0 && !methodIn(r.Method, m.methods) {
		return false
	}
	if len(m.query) > 0 {
		q := r.URL.Query()
		for _, kv := range m.query {
			if !anyEntry(q, kv, false) {
				return false
			}
		}
	}
	for _, kv := range m.headers {
		if !anyEntry(r.Header, kv, true) {
			return false
		}
	}
	return true
}

func methodIn(method string, list []string) bool {
	for _, m := range list {
		if strings.EqualFold(m, method) {
			return true
		}
	}
	return false
}
