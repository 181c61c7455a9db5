package controllers_test

import (
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

var _ = Describe("SandboxPool validation by the API server", func() {
	DescribeTable("refuses a template a pool cannot create members from, naming the field",
		func(source, extra, want string) {
			ns := newNamespace()
			manifest := "apiVersion: sandbox.sentry.io/v1alpha1\nkind: SandboxPool\nmetadata:\n  name: bad\n  namespace: " + ns +
				"\nspec:\n  replicas: 1\n  template:\n    spec:\n      source: " + source + "\n" + extra
			out, err := kubectlApply(manifest)
			Expect(err).To(HaveOccurred(), out)
			Expect(out).To(ContainSubstring(want))
		},
		Entry("a raw snapshot id", "{snapshotID: snap_abcdefghijklmnopqrstuvwxyz12}", "", "spec.template.spec.source.snapshotID: the manager creates a pool's members"),
		Entry("a team's own image", "{image: acme/agents/worker:1.4}", "", "spec.template.spec.source.image: the manager creates a pool's members"),
		Entry("adoption", "{adopt: {name: somebody}}", "", "spec.template.spec.source.adopt"),
		Entry("a poolRef", "{runtime: node24}", "      poolRef: {name: other}\n", "spec.template.spec.poolRef"),
		Entry("a rewind", "{runtime: node24}", "      rewind: {token: one, snapshotRef: {name: earlier}}\n", "spec.template.spec.rewind: members have no history"),
		Entry("a shutdown time", "{runtime: node24}", "      shutdownTime: \"2030-01-01T00:00:00Z\"\n", "spec.template.spec.shutdownTime"),
	)

	It("accepts a template from a managed image in a region", func() {
		ns := newNamespace()
		out, err := kubectlApply("apiVersion: sandbox.sentry.io/v1alpha1\nkind: SandboxPool\nmetadata:\n  name: good\n  namespace: " + ns +
			"\nspec:\n  replicas: 0\n  template:\n    spec:\n      source: {image: vercel/sandbox/node:24}\n      region: fra1\n")
		Expect(err).NotTo(HaveOccurred(), out)
	})
})
