package sandboxclient_test

import (
	"context"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/getsentry/sandbox-controller/localstack/clienttest"
	"github.com/getsentry/sandbox-controller/pkg/sandboxclient"
)

// The tests and the examples run against the dev environment of
// localstack/clienttest.
func TestMain(m *testing.M) { os.Exit(clienttest.Main(m)) }

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
	cfg := rest.CopyConfig(clienttest.Stack.Config)
	cfg.Wrap(log.wrap)
	c, err := sandboxclient.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	kc := kubernetes.NewForConfigOrDie(clienttest.Stack.Config)
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
