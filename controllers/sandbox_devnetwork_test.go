package controllers_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/types"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
	"github.com/getsentry/sandbox-controller/internal/vercel"
	"github.com/getsentry/sandbox-controller/localstack/emulator/sandboxruntime"
)

// The local stack is what `make dev` runs: etcd (which holds every Secret),
// the API server and the emulator on the host's loopback. A sandbox command
// used to share that loopback; with network policies enforced, each
// session has a network of its own whose only way out is the egress proxy,
// which refuses loopback and private addresses.
var _ = Describe("Sandbox network in the local stack", func() {
	ctx := context.Background()

	It("keeps sandbox commands away from the control plane's etcd and the emulator, directly and through the proxy", func() {
		// Only where the host cannot isolate a session's network (not
		// root, no namespaces): there the emulator says it does not enforce.
		if r, err := sandboxruntime.NewRunner(sandboxruntime.ModeNamespace, sandboxruntime.RunnerOptions{}); err != nil {
			Skip("exec mode namespace unavailable: " + err.Error())
		} else if ok, why := r.NetworkIsolation(); !ok {
			Skip("network isolation unavailable: " + why)
		}
		etcd := stack.ControlPlane.Env.ControlPlane.Etcd.URL
		Expect(etcd).NotTo(BeNil())
		etcdVersion := etcd.String() + "/version"
		By("checking that etcd answers on the host's loopback")
		res, err := http.Get(etcdVersion)
		Expect(err).NotTo(HaveOccurred())
		res.Body.Close()
		Expect(res.StatusCode).To(Equal(http.StatusOK))

		ns := newNamespace()
		key := types.NamespacedName{Namespace: ns, Name: "curious"}
		newSandbox(ns, key.Name, sandboxv1.SandboxSpec{Source: runtimeSource("node24")})
		var session string
		Eventually(func(g Gomega) {
			sbx := getSandbox(key)
			g.Expect(sbx.Status.Phase).To(Equal(sandboxv1.SandboxRunning))
			session = sbx.Status.SessionID
		}).Should(Succeed())

		script := fmt.Sprintf(`for u in %s %s/v2/sandboxes; do
  echo "direct $u: $(curl -sS --noproxy '*' --max-time 5 "$u" 2>&1)"
  echo "proxied $u: $(curl -sS --noproxy '' -x "$HTTP_PROXY" --max-time 5 "$u" 2>&1)"
done`, etcdVersion, stack.EmulatorURL)
		cmd, err := vc.RunCommand(ctx, session, vercel.RunCommandRequest{Command: "sh", Args: []string{"-c", script}})
		Expect(err).NotTo(HaveOccurred())
		lctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		stdout, _, err := vc.ReadAllLogs(lctx, session, cmd.ID)
		Expect(err).NotTo(HaveOccurred())
		lines := strings.Split(strings.TrimSpace(stdout), "\n")
		Expect(lines).To(HaveLen(4), stdout)
		for _, l := range lines {
			if strings.HasPrefix(l, "direct") {
				Expect(l).To(ContainSubstring("Couldn't connect"), "a direct connection is refused: the host's loopback is not the session's")
			} else {
				Expect(l).To(ContainSubstring("loopback, private or link-local"), "the proxy refuses the host's loopback")
			}
			Expect(l).NotTo(ContainSubstring("etcdserver"), "etcd answered")
		}
	})
})
