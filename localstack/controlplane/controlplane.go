// Package controlplane runs a local Kubernetes control plane that behaves like
// a cluster: etcd and kube-apiserver (through envtest) and, beside them,
// kube-controller-manager, so namespace deletion, garbage collection of owner
// references, ServiceAccounts and ResourceQuota work as users see them on a
// real cluster. The controller suites, `make dev`, `make demo`, the benchmark
// and the install tests all start their control plane here.
//
// The binaries come from hack/envtest.sh, which builds them from the Go module
// proxy (KUBEBUILDER_ASSETS names their directory).
package controlplane

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// The kube-controller-manager controllers a cluster user relies on without
// thinking of them. Node, pod, volume and cloud controllers are left out:
// nothing here runs pods.
var controllers = []string{
	"namespace-controller",
	"garbage-collector-controller",
	"resourcequota-controller",
	"serviceaccount-controller",
	"root-ca-certificate-publisher-controller",
	// Fills the built-in edit, view and admin ClusterRoles from the roles
	// labelled to aggregate into them (config/rbac's client roles).
	"clusterrole-aggregation-controller",
}

// workloadControllers turn a Deployment into ReplicaSets and Pods, and the
// pods' readiness back into the Deployment's status (what `kubectl rollout
// status` waits for).
var workloadControllers = []string{"deployment-controller", "replicaset-controller"}

func kcmControllers(workloads bool) []string {
	if workloads {
		return append(append([]string(nil), controllers...), workloadControllers...)
	}
	return controllers
}

// Options says what to start.
type Options struct {
	// AssetsDir holds kube-apiserver, etcd and kube-controller-manager;
	// $KUBEBUILDER_ASSETS when empty.
	AssetsDir string
	// StateDir keeps etcd's data and the certificates (`make dev` names one so
	// a killed run's leftovers are recognisable); a temporary directory,
	// removed by Stop, when empty.
	StateDir string
	// ControllerManager also runs kube-controller-manager.
	ControllerManager bool
	// Workloads also runs kube-controller-manager's deployment and
	// replicaset controllers, for a kubelet that runs the pods
	// (localstack/kubelet): a Deployment then rolls out as on a cluster.
	Workloads bool
	// CRDs is a YAML stream of CustomResourceDefinitions (Render's output for
	// config/crd) installed before Start returns, established and served.
	CRDs []byte
	// AuthenticationConfig, when set, is an AuthenticationConfiguration
	// (apiserver.config.k8s.io/v1) kube-apiserver is started with
	// (--authentication-config), e.g. a JWT authenticator trusting
	// localstack/oidcissuer. Its issuers must serve by then: the API server
	// fetches their discovery documents in the background from the start and
	// refuses their tokens until it has.
	AuthenticationConfig []byte
	// Out receives the control plane's own output; discarded when nil.
	Out io.Writer
}

// ControlPlane is a running control plane.
type ControlPlane struct {
	// Config authenticates as an administrator (group system:masters).
	Config *rest.Config
	// Env is the underlying envtest environment (AddUser, ControlPlane).
	Env *envtest.Environment

	dir, ownDir string
	kcm         *exec.Cmd
	kcmDone     chan error
}

// controlPlaneStartTimeout is how long each control-plane process may take
// to become healthy (envtest's own default is 20 s).
const controlPlaneStartTimeout = 2 * time.Minute

// Start starts the control plane and returns once the API server serves the
// CRDs and, when asked for, kube-controller-manager runs. On error whatever
// started is stopped again.
func Start(ctx context.Context, opts Options) (_ *ControlPlane, err error) {
	assets := opts.AssetsDir
	if assets == "" {
		assets = os.Getenv("KUBEBUILDER_ASSETS")
	}
	if assets == "" {
		return nil, errors.New("no control-plane binaries: set KUBEBUILDER_ASSETS to the directory hack/envtest.sh prints (make test, make dev and make bench do)")
	}
	out := opts.Out
	if out == nil {
		out = io.Discard
	}
	cp := &ControlPlane{dir: opts.StateDir}
	if cp.dir == "" {
		if cp.dir, err = os.MkdirTemp("", "controlplane-"); err != nil {
			return nil, err
		}
		cp.ownDir = cp.dir
	}
	defer func() {
		if err != nil {
			_ = cp.Stop()
		}
	}()
	for _, d := range []string{cp.path("etcd"), cp.path("certs"), cp.path("crds")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, err
		}
	}

	// envtest gives each process 20 s to become healthy. make test runs its
	// parts at once on two cores, and a kube-apiserver starting beside a
	// dozen others can take longer (a fresh-clone run timed one out); a
	// process that does not start at all still fails, only later.
	cp.Env = &envtest.Environment{BinaryAssetsDirectory: assets, ControlPlaneStartTimeout: controlPlaneStartTimeout}
	if len(opts.CRDs) > 0 {
		// envtest installs CRDs from files and waits until they are served.
		if err := os.WriteFile(cp.path("crds", "crds.yaml"), opts.CRDs, 0o600); err != nil {
			return nil, err
		}
		cp.Env.CRDDirectoryPaths = []string{cp.path("crds")}
		cp.Env.ErrorIfCRDPathMissing = true
	}
	cp.Env.ControlPlane.Etcd = &envtest.Etcd{DataDir: cp.path("etcd"), Out: out, Err: out}
	cp.Env.ControlPlane.APIServer = &envtest.APIServer{CertDir: cp.path("certs"), Out: out, Err: out}
	if len(opts.AuthenticationConfig) > 0 {
		path := cp.path("authentication-config.yaml")
		if err := os.WriteFile(path, opts.AuthenticationConfig, 0o600); err != nil {
			return nil, err
		}
		cp.Env.ControlPlane.APIServer.Configure().Set("authentication-config", path)
	}
	if cp.Config, err = cp.Env.Start(); err != nil {
		return nil, fmt.Errorf("start kube-apiserver and etcd: %w", err)
	}
	if opts.ControllerManager {
		if err := cp.startControllerManager(ctx, assets, out, opts.Workloads); err != nil {
			return nil, err
		}
	}
	return cp, nil
}

func (cp *ControlPlane) path(elem ...string) string {
	return filepath.Join(append([]string{cp.dir}, elem...)...)
}

func (cp *ControlPlane) startControllerManager(ctx context.Context, assets string, out io.Writer, workloads bool) error {
	bin := filepath.Join(assets, "kube-controller-manager")
	if _, err := os.Stat(bin); err != nil {
		return fmt.Errorf("kube-controller-manager is not in %s (hack/envtest.sh builds it): %w", assets, err)
	}
	kubeconfig := cp.path("kube-controller-manager.kubeconfig")
	if err := cp.writeUserKubeconfig("system:kube-controller-manager", kubeconfig); err != nil {
		return err
	}
	ca := cp.path("certs", "ca.crt")
	if err := os.WriteFile(ca, cp.Config.CAData, 0o600); err != nil {
		return err
	}
	cp.kcm = exec.Command(bin,
		"--kubeconfig="+kubeconfig,
		"--authentication-kubeconfig="+kubeconfig,
		"--authorization-kubeconfig="+kubeconfig,
		"--secure-port=0", // no one scrapes it here; nothing to collide with
		"--leader-elect=false",
		"--controllers="+strings.Join(kcmControllers(workloads), ","),
		"--root-ca-file="+ca,
		"--use-service-account-credentials=false",
		// Namespaces are deleted in seconds, not after the default sync.
		"--namespace-sync-period=10s",
		"--concurrent-namespace-syncs=5",
	)
	cp.kcm.Stdout, cp.kcm.Stderr = out, out
	// Its own process group, so Stop reaches it even if it forks.
	cp.kcm.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cp.kcm.Start(); err != nil {
		return fmt.Errorf("start kube-controller-manager: %w", err)
	}
	cp.kcmDone = make(chan error, 1)
	go func() { cp.kcmDone <- cp.kcm.Wait() }()

	// It is running once it has created the "default" ServiceAccount of an
	// existing namespace (the serviceaccount controller's first sync).
	cs, err := kubernetes.NewForConfig(cp.Config)
	if err != nil {
		return err
	}
	var last error
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		select {
		case err := <-cp.kcmDone:
			cp.kcmDone <- err
			return false, fmt.Errorf("kube-controller-manager exited: %v", err)
		default:
		}
		_, last = cs.CoreV1().ServiceAccounts(metav1.NamespaceDefault).Get(ctx, "default", metav1.GetOptions{})
		return last == nil, nil
	})
	if err != nil {
		return fmt.Errorf("kube-controller-manager did not start: %w (last check: %v)", err, last)
	}
	return nil
}

// Stop stops kube-controller-manager, kube-apiserver and etcd, and removes
// the state directory when Start made it.
func (cp *ControlPlane) Stop() error {
	var errs []error
	if cp.kcm != nil && cp.kcm.Process != nil {
		_ = syscall.Kill(-cp.kcm.Process.Pid, syscall.SIGTERM)
		select {
		case <-cp.kcmDone:
		case <-time.After(10 * time.Second):
			_ = syscall.Kill(-cp.kcm.Process.Pid, syscall.SIGKILL)
			<-cp.kcmDone
		}
		cp.kcm = nil
	}
	if cp.Env != nil {
		if err := cp.Env.Stop(); err != nil {
			errs = append(errs, err)
		}
	}
	if cp.ownDir != "" {
		if err := os.RemoveAll(cp.ownDir); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// ControllerManagerPID is kube-controller-manager's process id, 0 when it
// does not run.
func (cp *ControlPlane) ControllerManagerPID() int {
	if cp.kcm == nil || cp.kcm.Process == nil {
		return 0
	}
	return cp.kcm.Process.Pid
}

// WriteAdminKubeconfig writes a kubeconfig for an administrator (group
// system:masters), as kubectl and the manager binary read it.
func (cp *ControlPlane) WriteAdminKubeconfig(path string) error {
	return cp.writeUserKubeconfig("admin", path, "system:masters")
}

func (cp *ControlPlane) writeUserKubeconfig(name, path string, groups ...string) error {
	if len(groups) == 0 {
		groups = []string{"system:masters"}
	}
	u, err := cp.Env.AddUser(envtest.User{Name: name, Groups: groups}, nil)
	if err != nil {
		return fmt.Errorf("add user %s: %w", name, err)
	}
	kc, err := u.KubeConfig()
	if err != nil {
		return err
	}
	return os.WriteFile(path, kc, 0o600)
}

// WriteServiceAccountKubeconfig writes a kubeconfig that authenticates as the
// ServiceAccount namespace/name with a token from the TokenRequest API, as a
// pod of that ServiceAccount would: its requests are authorized by exactly the
// RBAC bound to it (and its groups system:serviceaccounts[:namespace]).
func (cp *ControlPlane) WriteServiceAccountKubeconfig(ctx context.Context, namespace, name, path string) error {
	cs, err := kubernetes.NewForConfig(cp.Config)
	if err != nil {
		return err
	}
	tr, err := cs.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](24 * 3600)},
	}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("token for ServiceAccount %s/%s: %w", namespace, name, err)
	}
	user := "system:serviceaccount:" + namespace + ":" + name
	kc := clientcmdapi.NewConfig()
	kc.Clusters["local"] = &clientcmdapi.Cluster{Server: cp.Config.Host, CertificateAuthorityData: cp.Config.CAData}
	kc.AuthInfos[user] = &clientcmdapi.AuthInfo{Token: tr.Status.Token}
	kc.Contexts["local"] = &clientcmdapi.Context{Cluster: "local", AuthInfo: user, Namespace: namespace}
	kc.CurrentContext = "local"
	return clientcmd.WriteToFile(*kc, path)
}
