package controllers_test

import (
	"fmt"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// spec.networkPolicy's allow rules and subnets as the API server checks
// them (Vercel's own request validator, mirrored in CEL), through the real
// kubectl and a server-side dry run: each entry one bad value, the message
// naming the field.
var _ = Describe("Validation of network policy rules by the API server", func() {
	var ns string
	BeforeEach(func() { ns = newNamespace() })

	dryRun := func(kind, spec string) (string, error) {
		manifest := fmt.Sprintf("apiVersion: sandbox.sentry.io/v1alpha1\nkind: %s\nmetadata:\n  name: probe\n  namespace: %s\nspec:\n%s", kind, ns, spec)
		return kubectlWithManifest(manifest, "apply", "--dry-run=server")
	}
	const rt = "  source: {runtime: node24}\n"
	// policy is a Sandbox spec whose policy allows api.github.com with the
	// one rule given (YAML flow style).
	policy := func(rule string) string {
		return rt + "  networkPolicy: {mode: Allowlist, allow: [{domain: registry.npmjs.org}, {domain: api.github.com, rules: [{response: {statusCode: 403}}, " + rule + "]}]}\n"
	}
	const fwd = "forwardURL: {valueFrom: {secretKeyRef: {name: broker, key: url}}}"
	const tr = "transform: {headers: [{name: Authorization, valueFrom: {secretKeyRef: {name: gh, key: token}}}]}"
	list := func(n int, item func(i int) string) string {
		items := make([]string, n)
		for i := range items {
			items[i] = item(i)
		}
		return "[" + strings.Join(items, ", ") + "]"
	}

	DescribeTable("refuses", func(spec string, want ...string) {
		out, err := dryRun("Sandbox", spec)
		Expect(err).To(HaveOccurred(), "accepted:\n%s", spec)
		for _, w := range want {
			Expect(out).To(ContainSubstring(w))
		}
	},
		Entry("a rule with two actions", policy("{"+fwd+", response: {statusCode: 403}}"),
			"spec.networkPolicy.allow[1].rules[1]", "spec.networkPolicy.allow[].rules[]: exactly one of transform, forwardURL, response"),
		Entry("injectHeaders for a domain whose allow entry has rules (its transform would shadow them)",
			rt+"  networkPolicy: {mode: Allowlist, injectHeaders: [{domain: api.github.com, headers: [{name: X, valueFrom: {secretKeyRef: {name: gh, key: token}}}]}], allow: [{domain: api.github.com, rules: [{"+fwd+"}]}]}\n",
			"spec.networkPolicy", "spec.networkPolicy.injectHeaders: a domain whose allow entry has rules takes its headers from a transform rule"),
		Entry("a rule with no action", policy("{match: {methods: [GET]}}"),
			"spec.networkPolicy.allow[1].rules[1]", "exactly one of transform, forwardURL, response"),
		Entry("a matcher with two ways", policy("{match: {path: {exact: /a, regex: '^/a'}}, "+tr+"}"),
			"spec.networkPolicy.allow[1].rules[1].match.path", "a matcher sets exactly one of exact, startsWith, regex"),
		Entry("an empty match", policy("{match: {}, "+tr+"}"),
			"spec.networkPolicy.allow[1].rules[1].match", "set at least one of path, methods, headers, queryString"),
		Entry("an empty header matcher", policy("{match: {headers: [{key: {exact: a}}, {}]}, "+fwd+"}"),
			"spec.networkPolicy.allow[1].rules[1].match.headers[1]", "a header or queryString matcher sets key, value or both"),
		Entry("a method that is no HTTP token", policy("{match: {methods: ['GE T']}, "+fwd+"}"),
			"spec.networkPolicy.allow[1].rules[1].match.methods[0]"),
		Entry("a body without contentType", policy("{response: {statusCode: 403, body: nope}}"),
			"spec.networkPolicy.allow[1].rules[1].response", "contentType is required when body is set"),
		Entry("a body on 204", policy("{response: {statusCode: 204, body: nope, contentType: text/plain}}"),
			"spec.networkPolicy.allow[1].rules[1].response", "body is not allowed on status codes 204, 205 and 304"),
		Entry("a status below 200", policy("{response: {statusCode: 199}}"),
			"spec.networkPolicy.allow[1].rules[1].response.statusCode", "greater than or equal to 200"),
		Entry("a status above 599", policy("{response: {statusCode: 600}}"),
			"spec.networkPolicy.allow[1].rules[1].response.statusCode", "less than or equal to 599"),
		Entry("a proxy-managed response header", policy("{response: {statusCode: 403, headers: {Content-Length: '3'}}}"),
			"spec.networkPolicy.allow[1].rules[1].response.headers", "connection, content-length and transfer-encoding are managed by the proxy"),
		Entry("response header names equal but for case", policy("{response: {statusCode: 403, headers: {X-A: '1', x-a: '2'}}}"),
			"spec.networkPolicy.allow[1].rules[1].response.headers", "names must be unique, ignoring case"),
		Entry("a response header name that is no token", policy("{response: {statusCode: 403, headers: {'a b': '1'}}}"),
			"spec.networkPolicy.allow[1].rules[1].response.headers", "each name must be an HTTP header name"),
		Entry("a huge body", policy("{response: {statusCode: 403, contentType: text/plain, body: "+strings.Repeat("a", 16385)+"}}"),
			"spec.networkPolicy.allow[1].rules[1].response.body", "Too long"),
		Entry("transform header names equal but for case", policy("{transform: {headers: [{name: A, valueFrom: {secretKeyRef: {name: s, key: k}}}, {name: a, valueFrom: {secretKeyRef: {name: s, key: k}}}]}}"),
			"spec.networkPolicy.allow[1].rules[1].transform.headers", "names must be unique, ignoring case"),
		Entry("a transform without headers", policy("{transform: {headers: []}}"),
			"spec.networkPolicy.allow[1].rules[1].transform.headers"),
		Entry("a forwardURL given as a value, not from a Secret", policy("{forwardURL: 'https://broker.example.com/x'}"),
			"spec.networkPolicy.allow[1].rules[1].forwardURL"),
		Entry("too many rules for a domain", rt+"  networkPolicy: {mode: Allowlist, allow: [{domain: a.com, rules: "+list(9, func(int) string { return "{response: {statusCode: 403}}" })+"}]}\n",
			"spec.networkPolicy.allow[0].rules", "must have at most 8 items"),
		Entry("too many allow entries", rt+"  networkPolicy: {mode: Allowlist, allow: "+list(33, func(i int) string { return fmt.Sprintf("{domain: d%d.com}", i) })+"}\n",
			"spec.networkPolicy.allow", "must have at most 32 items"),
		Entry("a domain twice", rt+"  networkPolicy: {mode: Allowlist, allow: [{domain: a.com}, {domain: a.com}]}\n",
			"spec.networkPolicy.allow[1]", "Duplicate value"),
		Entry("a domain that is a URL", rt+"  networkPolicy: {mode: Allowlist, allow: [{domain: 'https://a.com'}]}\n",
			"spec.networkPolicy.allow[0].domain"),
		Entry("allow without Allowlist", rt+"  networkPolicy: {mode: AllowAll, allow: [{domain: a.com}]}\n",
			"spec.networkPolicy.allow is only allowed with mode Allowlist"),
		Entry("subnets without Allowlist", rt+"  networkPolicy: {mode: DenyAll, subnets: {deny: [10.0.0.0/8]}}\n",
			"spec.networkPolicy.subnets is only allowed with mode Allowlist"),
		Entry("a subnet that is no CIDR", rt+"  networkPolicy: {mode: Allowlist, subnets: {allow: [10.0.0.0/8, 10.0.0.0/33]}}\n",
			"spec.networkPolicy.subnets.allow", "each entry must be a CIDR range"),
		Entry("a denied address without a prefix", rt+"  networkPolicy: {mode: Allowlist, subnets: {deny: [169.254.169.254]}}\n",
			"spec.networkPolicy.subnets.deny", "each entry must be a CIDR range"),
		Entry("too many subnets", rt+"  networkPolicy: {mode: Allowlist, subnets: {deny: "+list(65, func(i int) string { return fmt.Sprintf("10.%d.0.0/16", i) })+"}}\n",
			"spec.networkPolicy.subnets.deny", "must have at most 64 items"),
		Entry("a huge regex", policy("{match: {path: {regex: "+strings.Repeat("a", 1025)+"}}, "+fwd+"}"),
			"spec.networkPolicy.allow[1].rules[1].match.path.regex", "Too long"),
	)

	It("refuses a bad rule in a fork's template, naming the field", func() {
		out, err := dryRun("SandboxFork", "  source: {snapshotRef: {name: base}}\n  template: {spec: {networkPolicy: {mode: Allowlist, allow: [{domain: a.com, rules: [{}]}]}}}\n")
		Expect(err).To(HaveOccurred())
		Expect(out).To(ContainSubstring("spec.template.spec.networkPolicy.allow[0].rules[0]"))
		Expect(out).To(ContainSubstring("exactly one of transform, forwardURL, response"))
	})

	It("accepts Junior's egress broker pattern and every rule form, in a Sandbox, a fork's template and a class's defaults", func() {
		np := "{mode: Allowlist, allowedDomains: [registry.npmjs.org], " +
			"injectHeaders: [{domain: sentry.io, headers: [{name: Authorization, valueFrom: {secretKeyRef: {name: sentry, key: token}}}]}], " +
			"allow: [{domain: api.github.com, rules: [" +
			"{match: {methods: [POST, GET], path: {startsWith: /repos/}, headers: [{key: {exact: x-github-api-version}}], queryString: [{key: {exact: page}, value: {regex: '^[0-9]+$'}}]}, " + fwd + "}, " +
			"{match: {path: {exact: /rate_limit}}, " + tr + "}, " +
			"{response: {statusCode: 403, headers: {X-Denied-By: sandbox-policy}, body: '{\"error\":\"denied\"}', contentType: application/json}}]}, " +
			"{domain: sentry.io}, {domain: telemetry.example.com, rules: [{response: {statusCode: 204}}]}, {domain: '*.npmjs.org'}], " +
			"subnets: {allow: [10.0.0.0/8, 'fd00::/8'], deny: [10.1.0.0/16, 169.254.169.254/32]}}"
		for kind, spec := range map[string]string{
			"Sandbox":      rt + "  networkPolicy: " + np + "\n",
			"SandboxFork":  "  source: {snapshotRef: {name: base}}\n  template: {spec: {networkPolicy: " + np + "}}\n",
			"SandboxClass": "  credentialsSecretRef: {namespace: vercel, name: creds}\n  defaults: {networkPolicy: " + np + "}\n",
		} {
			out, err := dryRun(kind, spec)
			Expect(err).NotTo(HaveOccurred(), "%s: %s", kind, out)
		}
	})
})
