package controllers_test

import (
	"fmt"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// Input the API server must refuse, checked with the real kubectl against the
// CRDs as installed: each entry is one bad value, and the message must name
// the field. A server-side dry run goes through every validation (schema,
// CEL, admission) without creating anything.
var _ = Describe("Validation of every kind by the API server", func() {
	var ns string
	BeforeEach(func() { ns = newNamespace() })

	dryRun := func(kind, spec string) (string, error) {
		manifest := fmt.Sprintf("apiVersion: sandbox.sentry.io/v1alpha1\nkind: %s\nmetadata:\n  name: probe\n  namespace: %s\nspec:\n%s", kind, ns, spec)
		return kubectlWithManifest(manifest, "apply", "--dry-run=server")
	}
	refused := func(kind string) func(spec string, want ...string) {
		return func(spec string, want ...string) {
			out, err := dryRun(kind, spec)
			Expect(err).To(HaveOccurred(), "accepted:\n%s", spec)
			for _, w := range want {
				Expect(out).To(ContainSubstring(w))
			}
		}
	}
	long := func(n int) string { return strings.Repeat("a", n) }
	list := func(n int, item func(i int) string) string {
		items := make([]string, n)
		for i := range items {
			items[i] = item(i)
		}
		return "[" + strings.Join(items, ", ") + "]"
	}
	const rt = "  source: {runtime: node24}\n"
	const recipe = "  source: {recipe: {runtime: node24}}\n"
	const fork = "  source: {snapshotRef: {name: base}}\n"

	DescribeTable("a Sandbox", refused("Sandbox"),
		Entry("timeoutSeconds beyond Vercel's longest session", rt+"  timeoutSeconds: 86401\n",
			"spec.timeoutSeconds", "less than or equal to 86400"),
		Entry("timeoutSeconds that overflows a duration", rt+"  timeoutSeconds: 9223372036854775807\n", "spec.timeoutSeconds"),
		Entry("negative timeoutSeconds", rt+"  timeoutSeconds: -5\n", "spec.timeoutSeconds", "greater than or equal to 1"),
		Entry("snapshotRef that is no object name", "  source: {snapshotRef: {name: 'Bad_Name!'}}\n", "spec.source.snapshotRef.name"),
		Entry("snapshotRef name too long", "  source: {snapshotRef: {name: "+long(254)+"}}\n", "spec.source.snapshotRef.name", "Too long"),
		Entry("git revision that is an option", "  source: {git: {url: 'https://github.com/a/b', revision: '--upload-pack=touch /tmp/x'}}\n",
			"spec.source.git.revision"),
		Entry("git credentials secret that is no object name", "  source: {git: {url: 'https://github.com/a/b', credentials: {secretName: 'a/b'}}}\n",
			"spec.source.git.credentials.secretName"),
		Entry("negative git depth", "  source: {git: {url: 'https://github.com/a/b', depth: -1}}\n", "spec.source.git.depth"),
		Entry("env secret that is no object name", rt+"  env: [{name: A, valueFrom: {secretKeyRef: {name: '../x', key: k}}}]\n",
			"spec.env[0].valueFrom.secretKeyRef.name"),
		Entry("too many env entries", rt+"  env: "+list(129, func(i int) string { return fmt.Sprintf("{name: V%d, value: x}", i) })+"\n",
			"spec.env", "must have at most 128 items"),
		Entry("huge env value", rt+"  env: [{name: A, value: "+long(32769)+"}]\n", "spec.env[0].value", "Too long"),
		Entry("duplicate env names", rt+"  env: [{name: A, value: x}, {name: A, value: y}]\n", "spec.env[1]", "Duplicate value"),
		// No process environment can carry a NUL: accepted, it made every
		// command of the session fail while the Sandbox showed Ready.
		Entry("an env value with a NUL character", rt+"  env: [{name: A, value: x}, {name: B, value: \"a\\0b\"}]\n",
			"spec.env[1].value", "env value must not contain a NUL character"),
		Entry("header names equal but for case", rt+"  networkPolicy: {mode: Allowlist, injectHeaders: [{domain: a.com, headers: ["+
			"{name: Authorization, valueFrom: {secretKeyRef: {name: s, key: k}}}, {name: authorization, valueFrom: {secretKeyRef: {name: s, key: k}}}]}]}\n",
			"spec.networkPolicy.injectHeaders[0].headers", "header names must be unique, ignoring case"),
		Entry("too many allowed domains", rt+"  networkPolicy: {mode: Allowlist, allowedDomains: "+list(257, func(i int) string { return fmt.Sprintf("d%d.com", i) })+"}\n",
			"spec.networkPolicy.allowedDomains", "must have at most 256 items"),
		Entry("negative port", rt+"  ports: [-3000]\n", "spec.ports[0]"),
		Entry("port out of range", rt+"  ports: [70000]\n", "spec.ports[0]"),
		Entry("too many setup commands", rt+"  setup: "+list(33, func(int) string { return "{command: 'true'}" })+"\n",
			"spec.setup", "must have at most 32 items"),
		Entry("setup command timeout beyond Vercel's 5 h", rt+"  setup: [{command: 'true', timeoutSeconds: 18001}]\n", "spec.setup[0].timeoutSeconds"),
		Entry("huge setup argument", rt+"  setup: [{command: echo, args: ["+long(8193)+"]}]\n", "spec.setup[0].args[0]", "Too long"),
	)

	DescribeTable("a SandboxSnapshot", refused("SandboxSnapshot"),
		Entry("maxAgeSeconds of one second (a rebuild every second, for every sharer)", recipe+"  maxAgeSeconds: 1\n",
			"spec.maxAgeSeconds", "greater than or equal to 3600"),
		Entry("maxAgeSeconds that overflows a duration", recipe+"  maxAgeSeconds: 9223372036854775807\n",
			"spec.maxAgeSeconds", "less than or equal to 31536000"),
		Entry("expirationSeconds too short to keep a build", recipe+"  expirationSeconds: 4\n",
			"spec.expirationSeconds must be 0 (never expire) or at least 3600"),
		Entry("expirationSeconds that overflows a duration", recipe+"  expirationSeconds: 9223372036854775807\n",
			"spec.expirationSeconds", "less than or equal to 31536000"),
		Entry("negative expirationSeconds", recipe+"  expirationSeconds: -1\n", "spec.expirationSeconds"),
		Entry("baseSnapshotRef that is no object name", "  source: {recipe: {baseSnapshotRef: {name: 'UPPER'}}}\n",
			"spec.source.recipe.baseSnapshotRef.name"),
		Entry("sandboxRef that is no object name", "  source: {sandboxRef: {name: 'a b'}}\n", "spec.source.sandboxRef.name"),
		Entry("repository revision that is an option", "  source: {recipe: {runtime: node24, repositories: [{url: 'https://github.com/a/b', path: app, revision: '-f'}]}}\n",
			"spec.source.recipe.repositories[0].revision"),
		Entry("repository path out of the sandbox", "  source: {recipe: {runtime: node24, repositories: [{url: 'https://github.com/a/b', path: 'a/../../etc'}]}}\n",
			"spec.source.recipe.repositories[0].path"),
		Entry("too many repositories", "  source: {recipe: {runtime: node24, repositories: "+
			list(17, func(i int) string { return fmt.Sprintf("{url: 'https://github.com/a/b', path: p%d}", i) })+"}}\n",
			"spec.source.recipe.repositories", "must have at most 16 items"),
		Entry("build budget beyond 5 h", "  source: {recipe: {runtime: node24, timeoutSeconds: 18001}}\n", "spec.source.recipe.timeoutSeconds"),
		Entry("too many recipe env entries", "  source: {recipe: {runtime: node24, env: "+list(65, func(i int) string { return fmt.Sprintf("{name: V%d}", i) })+"}}\n",
			"spec.source.recipe.env", "must have at most 64 items"),
		Entry("a recipe env value with a NUL character", "  source: {recipe: {runtime: node24, env: [{name: A, value: \"\\0\"}]}}\n",
			"spec.source.recipe.env[0].value", `should match '^[^\x00]*$'`),
		Entry("huge rebuildEpoch", "  source: {recipe: {runtime: node24, rebuildEpoch: "+long(257)+"}}\n", "spec.source.recipe.rebuildEpoch", "Too long"),
	)

	DescribeTable("a SandboxFork", refused("SandboxFork"),
		Entry("negative replicas", fork+"  replicas: -1\n", "spec.replicas"),
		Entry("failureDeadlineSeconds that overflows a duration", fork+"  failureDeadlineSeconds: 9223372036854775807\n",
			"spec.failureDeadlineSeconds", "less than or equal to 604800"),
		Entry("children's timeoutSeconds beyond Vercel's longest session", fork+"  template: {spec: {timeoutSeconds: 86401}}\n",
			"spec.template.spec.timeoutSeconds"),
		Entry("children's port out of range", fork+"  template: {spec: {ports: [80]}}\n", "spec.template.spec.ports[0]"),
		Entry("a label value too long", fork+"  template: {metadata: {labels: {team: "+long(64)+"}}}\n",
			"spec.template.metadata.labels: each value must be at most 63 characters"),
		Entry("a label key children cannot carry", fork+"  template: {metadata: {labels: {'bad key': x}}}\n",
			"spec.template.metadata.labels: each key must be a valid label key"),
		Entry("too many labels", fork+"  template: {metadata: {labels: {"+strings.Trim(list(65, func(i int) string { return fmt.Sprintf("l%d: x", i) }), "[]")+"}}}\n",
			"spec.template.metadata.labels", "must have at most 64 items"),
		Entry("a huge annotation", fork+"  template: {metadata: {annotations: {note: "+long(4097)+"}}}\n",
			"spec.template.metadata.annotations: each value must be at most 4096 characters"),
		Entry("snapshotRef that is no object name", "  source: {snapshotRef: {name: 'x/y'}}\n", "spec.source.snapshotRef.name"),
		Entry("children's env value with a NUL character", fork+"  template: {spec: {env: [{name: A, value: \"a\\0\"}]}}\n",
			"spec.template.spec.env[0].value", "env value must not contain a NUL character"),
		// Reserved keys: copied onto every child, abandon-remote let a fork's
		// deletion leak its children's Vercel sandboxes (and, where its
		// admission policy is installed, no child could be created).
		Entry("the abandon-remote annotation on children", fork+"  template: {metadata: {annotations: {sandbox.sentry.io/abandon-remote: 'true'}}}\n",
			"spec.template.metadata.annotations: keys with the prefix sandbox.sentry.io/ are the controller's"),
		Entry("the paused annotation on children", fork+"  template: {metadata: {annotations: {note: x, sandbox.sentry.io/paused: 'true'}}}\n",
			"spec.template.metadata.annotations: keys with the prefix sandbox.sentry.io/ are the controller's"),
		Entry("the class label on children", fork+"  template: {metadata: {labels: {sandbox.sentry.io/class: other}}}\n",
			"spec.template.metadata.labels: keys with the prefix sandbox.sentry.io/ are the controller's"),
		Entry("a lineage label on children", fork+"  template: {metadata: {labels: {sandbox.sentry.io/fork: other}}}\n",
			"spec.template.metadata.labels: keys with the prefix sandbox.sentry.io/ are the controller's"),
	)

	It("accepts the boundary values", func() {
		for kind, spec := range map[string]string{
			"Sandbox": rt + "  timeoutSeconds: 86400\n  ports: [1024, 65535]\n" +
				"  env: [{name: A, value: \"tab\\tand\\nnewline\\u0001\"}]\n" +
				"  networkPolicy: {mode: Allowlist, injectHeaders: [{domain: a.com, headers: [{name: Authorization, valueFrom: {secretKeyRef: {name: s.v1, key: k}}}, {name: X-Key, valueFrom: {secretKeyRef: {name: s, key: k}}}]}]}\n",
			"SandboxSnapshot": "  source: {recipe: {runtime: node24, repositories: [{url: 'https://github.com/a/b', path: app, revision: release/v1.2}]}}\n" +
				"  maxAgeSeconds: 3600\n  expirationSeconds: 0\n",
			"SandboxFork": fork + "  failureDeadlineSeconds: 604800\n" +
				"  template: {metadata: {labels: {example.com/team: a-b_c.d, empty: ''}, annotations: {example.com/note: " + long(4096) + ", sandbox.sentry.io.example.com/note: x}}, spec: {timeoutSeconds: 86400}}\n",
		} {
			out, err := dryRun(kind, spec)
			Expect(err).NotTo(HaveOccurred(), "%s refused:\n%s", kind, out)
		}
		for _, exp := range []string{"3600", "31536000"} {
			out, err := dryRun("SandboxSnapshot", recipe+"  expirationSeconds: "+exp+"\n  maxAgeSeconds: 31536000\n")
			Expect(err).NotTo(HaveOccurred(), out)
		}
	})
})
