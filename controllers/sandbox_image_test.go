package controllers_test

import (
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
)

// Issue 34 item 2: a Sandbox starts from one of Vercel's managed images.
var _ = Describe("Sandbox from a managed image", func() {
	It("creates the Vercel sandbox from the image, which Vercel pins to a digest, with no runtime", func() {
		ns := newNamespace()
		img := sandboxv1.ImageReference("vercel/sandbox/python:3.14")
		sbx := waitReady(client.ObjectKeyFromObject(newSandbox(ns, "imaged", sandboxv1.SandboxSpec{Source: sandboxv1.SandboxSource{Image: &img}})))
		remote, ok := emu.Sandbox(sbx.Status.VercelName)
		Expect(ok).To(BeTrue())
		Expect(remote.Image).To(HavePrefix("vercel/sandbox/python@sha256:"))
		Expect(remote.Runtime).To(BeEmpty())
		Expect(strings.Count(remote.Image, "@sha256:")).To(Equal(1))
	})
})
