package controllers_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/getsentry/sandbox-controller/controllers"
)

// The key Secret as the install ships it, and what the manager may do to it:
// the Secret and the Role of config/rbac/status_digest_key.yaml, put in this
// spec's namespace and bound to a user standing in for the manager.
var _ = Describe("Secret rotation: the status digest key", func() {
	const manager = "digest-key-manager"
	var (
		ctx    context.Context
		ns     string
		secret string // the shipped Secret's name
		asMgr  client.Client
	)
	BeforeEach(func() {
		ctx = context.Background()
		ns = newNamespace()
		b, err := os.ReadFile(filepath.Join("..", "config", "rbac", "status_digest_key.yaml"))
		Expect(err).NotTo(HaveOccurred())
		var role *rbacv1.Role
		for doc := range strings.SplitSeq(string(b), "\n---\n") {
			var meta metav1.TypeMeta
			Expect(yaml.Unmarshal([]byte(doc), &meta)).To(Succeed())
			switch meta.Kind {
			case "Secret":
				var s corev1.Secret
				Expect(yaml.Unmarshal([]byte(doc), &s)).To(Succeed())
				Expect(s.Data).To(BeEmpty(), "the shipped Secret carries no data: an apply or upgrade would overwrite the manager's key")
				Expect(s.StringData).To(BeEmpty())
				secret = s.Name
				s.Namespace = ns
				Expect(k8sClient.Create(ctx, &s)).To(Succeed())
			case "Role":
				role = &rbacv1.Role{}
				Expect(yaml.Unmarshal([]byte(doc), role)).To(Succeed())
			}
		}
		Expect(secret).NotTo(BeEmpty())
		Expect(role).NotTo(BeNil())
		role.ObjectMeta = metav1.ObjectMeta{Namespace: ns, Name: role.Name}
		Expect(k8sClient.Create(ctx, role)).To(Succeed())
		Expect(k8sClient.Create(ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: role.Name},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
			Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: manager}},
		})).To(Succeed())
		c := rest.CopyConfig(cfg)
		c.Impersonate = rest.ImpersonationConfig{UserName: manager}
		asMgr, err = client.New(c, client.Options{Scheme: k8sClient.Scheme()})
		Expect(err).NotTo(HaveOccurred())
	})

	It("is written once into the shipped empty Secret by replicas starting together, with no right to create Secrets, and kept", func() {
		where := controllers.DigestKeySecret{Namespace: ns, Name: secret}
		By("the manager's rights: no Secret can be created")
		err := asMgr.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "minted"}})
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "create a Secret as the manager: %v", err)

		By("three replicas start at once")
		keys := make([][]byte, 3)
		errs := make([]error, 3)
		var wg sync.WaitGroup
		for i := range keys {
			wg.Go(func() { keys[i], errs[i] = controllers.LoadDigestKey(ctx, asMgr, asMgr, where) })
		}
		wg.Wait()
		for i := range keys {
			Expect(errs[i]).NotTo(HaveOccurred())
			Expect(keys[i]).To(HaveLen(32))
			Expect(keys[i]).To(Equal(keys[0]), "replica %d holds another key: its digests would disagree", i)
		}
		sec := &corev1.Secret{}
		Expect(k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: secret}, sec)).To(Succeed())
		Expect(sec.Data).To(HaveKeyWithValue("key", keys[0]))

		By("a restart reads the key and writes nothing")
		again, err := controllers.LoadDigestKey(ctx, asMgr, asMgr, where)
		Expect(err).NotTo(HaveOccurred())
		Expect(again).To(Equal(keys[0]))
		after := &corev1.Secret{}
		Expect(k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: secret}, after)).To(Succeed())
		Expect(after.ResourceVersion).To(Equal(sec.ResourceVersion))
	})

	It("is refused, not created, when the Secret is missing or holds a short key", func() {
		Expect(k8sClient.Delete(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: secret}})).To(Succeed())
		// With an administrator's client, so that only the option, not RBAC,
		// keeps the Secret from being created.
		_, err := controllers.LoadDigestKey(ctx, k8sClient, k8sClient, controllers.DigestKeySecret{Namespace: ns, Name: secret})
		Expect(err).To(MatchError(ContainSubstring("does not exist")))
		Expect(err).To(MatchError(ContainSubstring(ns + "/" + secret)))
		Expect(apierrors.IsNotFound(k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: secret}, &corev1.Secret{}))).To(BeTrue(), "a Secret was created without CreateMissing")

		short := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: secret}, Data: map[string][]byte{"key": []byte("too-short")}}
		Expect(k8sClient.Create(ctx, short)).To(Succeed())
		_, err = controllers.LoadDigestKey(ctx, asMgr, asMgr, controllers.DigestKeySecret{Namespace: ns, Name: secret})
		Expect(err).To(MatchError(ContainSubstring("fewer than 32")))
		Expect(err.Error()).NotTo(ContainSubstring("too-short"), "the Secret's value in an error")
		kept := &corev1.Secret{}
		Expect(k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: secret}, kept)).To(Succeed())
		Expect(kept.Data).To(HaveKeyWithValue("key", []byte("too-short")), "a key someone set was replaced silently")

		By("out of a cluster, with CreateMissing, it is created and filled")
		other := controllers.DigestKeySecret{Namespace: ns, Name: "created", CreateMissing: true}
		key, err := controllers.LoadDigestKey(ctx, k8sClient, k8sClient, other)
		Expect(err).NotTo(HaveOccurred())
		Expect(key).To(HaveLen(32))
	})
})
