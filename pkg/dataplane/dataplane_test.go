package dataplane_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
	"github.com/getsentry/sandbox-controller/localstack/clienttest"
	"github.com/getsentry/sandbox-controller/pkg/dataplane"
	"github.com/getsentry/sandbox-controller/pkg/sandboxclient"
)

func TestMain(m *testing.M) { os.Exit(clienttest.Main(m)) }

// session returns the data-plane session of a new Ready Sandbox, found the
// way a program finds it: the Sandbox's status and the environment.
func session(t *testing.T, name string) (*dataplane.Session, *sandboxclient.Client, *sandboxv1.Sandbox) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sc, err := sandboxclient.NewForConfig(clienttest.Stack.Config)
	if err != nil {
		t.Fatal(err)
	}
	rt := sandboxv1.Runtime("node24")
	sbx, err := sc.EnsureReady(ctx, &sandboxv1.Sandbox{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Spec:       sandboxv1.SandboxSpec{Source: sandboxv1.SandboxSource{Runtime: &rt}},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := sc.Delete(ctx, "default", name); err != nil {
			t.Error(err)
		}
	})
	dp, err := dataplane.NewFromEnv()
	if err != nil {
		t.Fatal(err)
	}
	s, err := dp.Session(sbx)
	if err != nil {
		t.Fatal(err)
	}
	if s.ID() != sbx.Status.SessionID {
		t.Fatalf("session %s, want the Sandbox's %s", s.ID(), sbx.Status.SessionID)
	}
	return s, sc, sbx
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func TestRunStreamsOutputAndExitCode(t *testing.T) {
	s, _, _ := session(t, "run")
	var stdout, stderr bytes.Buffer
	code, err := s.Run(testContext(t), dataplane.Command{
		Name: "sh", Args: []string{"-c", "echo out; echo err >&2; echo $GREETING; exit 7"},
		Env: map[string]string{"GREETING": "hi"},
	}, &stdout, &stderr)
	if err != nil {
		t.Fatal(err)
	}
	if code != 7 || stdout.String() != "out\nhi\n" || stderr.String() != "err\n" {
		t.Errorf("Run = exit %d, stdout %q, stderr %q; want 7, \"out\\nhi\\n\", \"err\\n\"", code, stdout.String(), stderr.String())
	}
}

func TestStartWaitLogsKill(t *testing.T) {
	s, _, _ := session(t, "detached")
	ctx := testContext(t)

	id, err := s.Start(ctx, dataplane.Command{Name: "sh", Args: []string{"-c", "echo started; exit 5"}})
	if err != nil {
		t.Fatal(err)
	}
	if code, err := s.Wait(ctx, id); err != nil || code != 5 {
		t.Errorf("Wait = %d, %v; want 5", code, err)
	}
	var out bytes.Buffer
	if err := s.Logs(ctx, id, &out, nil); err != nil || out.String() != "started\n" {
		t.Errorf("Logs = %q, %v; want \"started\\n\"", out.String(), err)
	}

	long, err := s.Start(ctx, dataplane.Command{Name: "sleep", Args: []string{"600"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Kill(ctx, long, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	code, err := s.Wait(ctx, long)
	if err != nil || code == 0 {
		t.Errorf("Wait of a killed command = %d, %v; want a non-zero exit code", code, err)
	}
}

func TestFiles(t *testing.T) {
	s, _, _ := session(t, "files")
	ctx := testContext(t)
	if err := s.WriteFiles(ctx,
		dataplane.File{Path: "notes/a.txt", Content: []byte("relative\n")},
		dataplane.File{Path: "/tmp/run.sh", Content: []byte("#!/bin/sh\necho ran\n"), Mode: 0o755},
	); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]string{
		"notes/a.txt":                 "relative\n",
		"/vercel/sandbox/notes/a.txt": "relative\n",
		"/tmp/run.sh":                 "#!/bin/sh\necho ran\n",
	} {
		if got, err := s.ReadFile(ctx, path); err != nil || string(got) != want {
			t.Errorf("ReadFile(%s) = %q, %v; want %q", path, got, err, want)
		}
	}
	var out bytes.Buffer
	if code, err := s.Run(ctx, dataplane.Command{Name: "/tmp/run.sh"}, &out, nil); err != nil || code != 0 || out.String() != "ran\n" {
		t.Errorf("running the written script = %d %q %v; want it executable", code, out.String(), err)
	}
	_, err := s.ReadFile(ctx, "missing.txt")
	if !dataplane.IsNotFound(err) {
		t.Errorf("ReadFile of a missing file = %v, want IsNotFound", err)
	}
	if err := s.Mkdir(ctx, "/vercel/sandbox/x/y/z"); err != nil {
		t.Fatal(err)
	}
	if code, err := s.Run(ctx, dataplane.Command{Name: "test", Args: []string{"-d", "/vercel/sandbox/x/y/z"}}, nil, nil); err != nil || code != 0 {
		t.Errorf("test -d after Mkdir = %d, %v", code, err)
	}
}

func TestSessionOfAPausedSandbox(t *testing.T) {
	s, sc, sbx := session(t, "paused")
	ctx := testContext(t)
	if _, err := sc.Pause(ctx, "default", sbx.Name); err != nil {
		t.Fatal(err)
	}
	stopped, err := sc.WaitStopped(ctx, "default", sbx.Name)
	if err != nil {
		t.Fatal(err)
	}
	dp, err := dataplane.NewFromEnv()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dp.Session(stopped); !errors.Is(err, dataplane.ErrNotRunning) {
		t.Errorf("Session of a stopped Sandbox = %v, want ErrNotRunning", err)
	}
	// The old session is gone: the error says so.
	_, err = s.Run(ctx, dataplane.Command{Name: "true"}, nil, nil)
	if !dataplane.IsSessionStopped(err) {
		t.Errorf("Run in a stopped session = %v, want IsSessionStopped", err)
	}
}

func TestConfigFromEnvNeverPrintsTheToken(t *testing.T) {
	cfg := dataplane.ConfigFromEnv()
	token := os.Getenv(dataplane.EnvToken)
	if token == "" || cfg.Token != token || cfg.BaseURL != os.Getenv(dataplane.EnvAPIURL) || cfg.TeamID == "" || cfg.ProjectID == "" {
		t.Fatalf("ConfigFromEnv = %v, want the VERCEL_* variables", cfg)
	}
	printed := fmt.Sprintf("%v %+v %#v %s", cfg, cfg, cfg, cfg)
	if strings.Contains(printed, token) {
		t.Error("a printed Config contains the token")
	}
	if _, err := dataplane.New(dataplane.Config{}); err == nil {
		t.Error("New without credentials succeeded")
	}
}
