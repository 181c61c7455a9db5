package controllers_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	"github.com/getsentry/sandbox-controller/controllers"
)

// The manager's cache of Secrets (the rotation watch's metadata) must hold
// no value, though `kubectl apply` copies the whole Secret into an
// annotation.
var _ = Describe("The manager's cache", func() {
	It("keeps no Secret value, not even in kubectl's last-applied annotation", func(ctx context.Context) {
		ns := newNamespace()
		const canary = "cached-canary-5f1e"
		manifest := filepath.Join(GinkgoT().TempDir(), "secret.yaml")
		Expect(os.WriteFile(manifest, []byte("apiVersion: v1\nkind: Secret\nmetadata:\n  name: applied\n  namespace: "+ns+"\nstringData:\n  token: "+canary+"\n"), 0o600)).To(Succeed())
		out, err := exec.Command("kubectl", "--kubeconfig", kubeconfigPath, "apply", "-f", manifest).CombinedOutput()
		Expect(err).NotTo(HaveOccurred(), string(out))

		// The server copy carries the value in the annotation: the
		// premise of this spec.
		server := &metav1.PartialObjectMetadata{}
		server.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
		key := types.NamespacedName{Namespace: ns, Name: "applied"}
		Expect(k8sClient.Get(ctx, key, server)).To(Succeed())
		Expect(server.Annotations["kubectl.kubernetes.io/last-applied-configuration"]).To(ContainSubstring(canary))

		// A cache built with the manager's options, as cmd/manager builds it.
		opts := controllers.CacheOptions()
		opts.Scheme = k8sClient.Scheme()
		c, err := cache.New(cfg, opts)
		Expect(err).NotTo(HaveOccurred())
		cctx, cancel := context.WithCancel(ctx)
		defer cancel()
		go func() { _ = c.Start(cctx) }()
		cached := &metav1.PartialObjectMetadata{}
		cached.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
		Eventually(func() error { return c.Get(cctx, key, cached) }).Should(Succeed())
		Expect(cached.ResourceVersion).To(Equal(server.ResourceVersion))
		Expect(cached.Annotations).To(BeEmpty())
		Expect(strings.Contains(cached.String(), canary)).To(BeFalse(), "the cached metadata holds the Secret's value")
	})
})
