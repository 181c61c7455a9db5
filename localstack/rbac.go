package localstack

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/getsentry/sandbox-controller/localstack/controlplane"
)

// rbacKinds are the kinds of config/default that give the manager its
// identity and permissions: what `make deploy` installs besides the CRDs,
// the admission policies (Start installs both) and the workload. The one
// Secret is the empty one the manager keeps its status digest key in
// (config/rbac/status_digest_key.yaml): it may fill it in, not create it.
var rbacKinds = []string{"Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "Secret"}

// ManagerIdentity is who the manager is in a cluster `make deploy` set up.
type ManagerIdentity struct {
	// Namespace and ServiceAccount are those of the manager's Deployment.
	Namespace, ServiceAccount string
}

// User is the user name the API server authorizes the manager's requests as.
func (id ManagerIdentity) User() string {
	return "system:serviceaccount:" + id.Namespace + ":" + id.ServiceAccount
}

// Groups are the groups a token of the ServiceAccount carries.
func (id ManagerIdentity) Groups() []string {
	return []string{"system:serviceaccounts", "system:serviceaccounts:" + id.Namespace, "system:authenticated"}
}

// InstallManagerRBAC installs the manager's namespace, ServiceAccount,
// ClusterRoles, Roles and their bindings exactly as `make deploy` renders
// them (kustomize build config/default), and returns a configuration that
// acts as the ServiceAccount the rendered Deployment runs as: its requests
// are authorized by that RBAC alone, so a rule the manager lacks fails here
// as it would in a cluster. The configuration impersonates the
// ServiceAccount with the administrator's credentials (user and groups as
// its token would carry them), so it does not expire while `make dev` runs.
func (s *Stack) InstallManagerRBAC(ctx context.Context) (*rest.Config, ManagerIdentity, error) {
	manifests, err := controlplane.Render(s.RepoRoot, "config/default")
	if err != nil {
		return nil, ManagerIdentity{}, fmt.Errorf("render config/default: %w", err)
	}
	var id ManagerIdentity
	dec := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(manifests), 4096)
	for {
		var u unstructured.Unstructured
		if err := dec.Decode(&u.Object); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, id, fmt.Errorf("decode config/default: %w", err)
		}
		switch kind := u.GetKind(); {
		case kind == "Deployment":
			id.Namespace = u.GetNamespace()
			id.ServiceAccount, _, _ = unstructured.NestedString(u.Object, "spec", "template", "spec", "serviceAccountName")
		case slices.Contains(rbacKinds, kind):
			if err := s.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(&u), client.FieldOwner("make-dev"), client.ForceOwnership); err != nil {
				return nil, id, fmt.Errorf("apply %s %s: %w", kind, u.GetName(), err)
			}
		}
	}
	if id.Namespace == "" || id.ServiceAccount == "" {
		return nil, id, errors.New("config/default renders no Deployment with a namespace and a serviceAccountName")
	}
	cfg := rest.CopyConfig(s.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: id.User(), Groups: id.Groups()}
	return cfg, id, nil
}

// WriteManagerKubeconfig writes a kubeconfig that acts as the manager (the
// configuration InstallManagerRBAC returned), for `kubectl auth can-i` and
// for trying a request with the manager's permissions.
func (s *Stack) WriteManagerKubeconfig(cfg *rest.Config, path string) error {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["local"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["manager"] = &clientcmdapi.AuthInfo{
		ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken,
		Impersonate: cfg.Impersonate.UserName, ImpersonateGroups: cfg.Impersonate.Groups,
	}
	kc.Contexts["local"] = &clientcmdapi.Context{Cluster: "local", AuthInfo: "manager"}
	kc.CurrentContext = "local"
	return clientcmd.WriteToFile(*kc, path)
}
