package sandboxclient_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/getsentry/sandbox-controller/controllers"
	"github.com/getsentry/sandbox-controller/internal/localstack"
	"github.com/getsentry/sandbox-controller/internal/vercel"
	"github.com/getsentry/sandbox-controller/pkg/sandboxclient"
)

// The dev environment every test and example runs against: the real API
// server with the CRDs, the emulator and the manager with all controllers.
// KUBECONFIG and the VERCEL_* variables are set as `make dev` prints them,
// so the examples read them as a user's program does.
var (
	stack *localstack.Stack
	vc    *vercel.Client
)

func TestMain(m *testing.M) { os.Exit(runTests(m)) }

func runTests(m *testing.M) int {
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		fmt.Fprintln(os.Stderr, "KUBEBUILDER_ASSETS is not set: run KUBEBUILDER_ASSETS=$(./hack/envtest.sh) go test ./pkg/sandboxclient/")
		return 1
	}
	ctrl.SetLogger(logr.Discard())
	ctx := context.Background()
	var err error
	stack, err = localstack.Start(ctx, localstack.Options{AssetsDir: assets, ControllerManager: true})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer stack.Stop()
	vcfg := stack.Vercel("")
	if vc, err = vercel.New(vcfg); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	mgr, err := stack.StartManager(ctx, nil, ctrl.Options{
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
	}, vcfg, controllers.Options{PollInterval: time.Second})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer mgr.Stop()

	dir, err := os.MkdirTemp("", "sandboxclient-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := stack.ControlPlane.WriteAdminKubeconfig(kubeconfig); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	for k, v := range map[string]string{
		"KUBECONFIG": kubeconfig, "VERCEL_API_URL": vcfg.BaseURL, "VERCEL_TOKEN": vcfg.Token,
		"VERCEL_TEAM_ID": vcfg.TeamID, "VERCEL_PROJECT_ID": vcfg.ProjectID,
	} {
		os.Setenv(k, v)
	}
	// The examples use the namespace "default"; it exists from the start.
	return m.Run()
}

// requestLog records the requests a Client sends to the API server, to
// assert how the library talks to it (watches, not polls; one patch).
type requestLog struct {
	mu   sync.Mutex
	reqs []string // "METHOD path?query"
}

func (l *requestLog) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(r *http.Request) (*http.Response, error) {
		l.mu.Lock()
		l.reqs = append(l.reqs, r.Method+" "+r.URL.Path+"?"+r.URL.RawQuery)
		l.mu.Unlock()
		return rt.RoundTrip(r)
	})
}

// count returns how many requests had the method and contain substr.
func (l *requestLog) count(method, substr string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, r := range l.reqs {
		if strings.HasPrefix(r, method+" ") && strings.Contains(r, substr) {
			n++
		}
	}
	return n
}

func (l *requestLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.reqs, "\n")
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// newClient returns a Client on the administrator's credentials whose
// requests are recorded, and a fresh namespace for the test.
func newClient(t *testing.T) (*sandboxclient.Client, *requestLog, string) {
	t.Helper()
	log := &requestLog{}
	cfg := rest.CopyConfig(stack.Config)
	cfg.Wrap(log.wrap)
	c, err := sandboxclient.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	kc := kubernetes.NewForConfigOrDie(stack.Config)
	ns, err := kc.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "sandboxclient-"},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return c, log, ns.Name
}

func testContext(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
