// Package release tests `make release` as a user meets its output: the
// plugin is installed from the krew manifest's archive for this machine
// (checksum verified, unpacked per the manifest's files and bin) and run
// through the real kubectl, which reports its version and the version of a
// real manager binary holding its leader election Lease.
//
// The test builds the plugin part for this machine's platform only: the
// other three platforms, the image index, install.yaml and the chart take
// minutes more on a CI machine (CONTRIBUTING.md has the timings), and the
// code that builds them is the same hack/release.
package release

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/yaml"

	"github.com/getsentry/sandbox-controller/localstack"
	"github.com/getsentry/sandbox-controller/localstack/emulator"
)

const (
	testVersion = "v0.0.0-releasetest"
	releaseURL  = "https://downloads.example.com/sandbox-controller/" + testVersion
)

var root = filepath.Join("..", "..")

// The local control plane logs through controller-runtime's logger, which
// prints a stack trace when nothing set it.
func init() { ctrllog.SetLogger(logr.Discard()) }

// cleanEnv is the environment without make's variables (a `make test`
// running this must not pass its command line to the inner make) and
// without what would change the release's inputs.
func cleanEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES", "SOURCE_DATE_EPOCH", "VERSION", "REVISION", "GOOS", "GOARCH":
			continue
		}
		env = append(env, kv)
	}
	return append(env, extra...)
}

func git(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("git %q: %v", args, err)
	}
	return strings.TrimSpace(string(out))
}

// makeRelease runs `make release` for the plugin of this platform into dist.
// The commit is passed as make would compute it, so that a commit made
// meanwhile in a shared work tree does not change it between the two builds.
func makeRelease(t *testing.T, ctx context.Context, dist, head string, commitTime time.Time) time.Duration {
	t.Helper()
	start := time.Now()
	cmd := exec.CommandContext(ctx, "make", "--no-print-directory", "-C", root, "release",
		"DIST="+dist, "VERSION="+testVersion, "RELEASE_URL="+releaseURL,
		"REVISION="+head, fmt.Sprintf("SOURCE_DATE_EPOCH=%d", commitTime.Unix()), "COMMIT_TIME="+commitTime.Format(time.RFC3339),
		"RELEASE_PARTS=plugin", "RELEASE_PLUGIN_PLATFORMS="+runtime.GOOS+"/"+runtime.GOARCH)
	cmd.Env = cleanEnv()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("make release: %v\n%s", err, out)
	}
	d := time.Since(start)
	t.Logf("make release (plugin, %s/%s) took %s:\n%s", runtime.GOOS, runtime.GOARCH, d.Round(100*time.Millisecond), out)
	return d
}

// krewPlugin is the part of krew's Plugin manifest an install reads.
type krewPlugin struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Spec struct {
		Version   string `json:"version"`
		Platforms []struct {
			Selector struct {
				MatchLabels map[string]string `json:"matchLabels"`
			} `json:"selector"`
			URI    string `json:"uri"`
			SHA256 string `json:"sha256"`
			Files  []struct {
				From string `json:"from"`
				To   string `json:"to"`
			} `json:"files"`
			Bin string `json:"bin"`
		} `json:"platforms"`
	} `json:"spec"`
}

// TestInstallThePluginFromTheKrewManifest builds the release's plugin, checks
// SHA256SUMS and the krew manifest against the files, installs the plugin as
// krew does from the manifest's archive for this platform, and runs
// `kubectl sandbox version` against a local control plane where a manager
// binary of the same version holds its leader election Lease: both versions
// are reported. A second build gives the same SHA256SUMS.
func TestInstallThePluginFromTheKrewManifest(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	head := git(t, "rev-parse", "HEAD")
	commitEpoch, err := strconv.ParseInt(git(t, "log", "-1", "--format=%ct"), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	commitTime := time.Unix(commitEpoch, 0).UTC()

	dist := filepath.Join(t.TempDir(), "dist")
	first := makeRelease(t, ctx, dist, head, commitTime)

	// SHA256SUMS names every file of dist with its digest.
	sums := map[string]string{}
	f, err := os.Open(filepath.Join(dist, "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		sum, name, ok := strings.Cut(sc.Text(), "  ")
		if !ok {
			t.Fatalf("SHA256SUMS line %q is not sha256sum's format", sc.Text())
		}
		sums[name] = sum
	}
	f.Close()
	entries, err := os.ReadDir(dist)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() == "SHA256SUMS" {
			continue
		}
		if got := fileSHA256(t, filepath.Join(dist, e.Name())); sums[e.Name()] != got {
			t.Errorf("SHA256SUMS says %s is %q; it is %s", e.Name(), sums[e.Name()], got)
		}
	}
	if len(sums) != len(entries)-1 {
		t.Errorf("SHA256SUMS lists %d files, dist holds %d besides it", len(sums), len(entries)-1)
	}

	// The krew manifest: this version, one platform (the one built), its
	// archive's URL under RELEASE_URL and its real checksum.
	b, err := os.ReadFile(filepath.Join(dist, "sandbox.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var m krewPlugin
	if err := yaml.Unmarshal(b, &m); err != nil {
		t.Fatalf("sandbox.yaml: %v", err)
	}
	if m.APIVersion != "krew.googlecontainertools.github.com/v1alpha2" || m.Kind != "Plugin" || m.Metadata.Name != "sandbox" {
		t.Errorf("sandbox.yaml is %s %s %q, want krew's v1alpha2 Plugin sandbox", m.APIVersion, m.Kind, m.Metadata.Name)
	}
	if m.Spec.Version != testVersion {
		t.Errorf("spec.version = %q, want %q", m.Spec.Version, testVersion)
	}
	if len(m.Spec.Platforms) != 1 {
		t.Fatalf("the manifest lists %d platforms, want the one built", len(m.Spec.Platforms))
	}
	p := m.Spec.Platforms[0]
	if l := p.Selector.MatchLabels; l["os"] != runtime.GOOS || l["arch"] != runtime.GOARCH {
		t.Fatalf("platform selector %v, want os %s arch %s", l, runtime.GOOS, runtime.GOARCH)
	}
	archiveName := fmt.Sprintf("kubectl-sandbox_%s_%s.tar.gz", runtime.GOOS, runtime.GOARCH)
	if want := releaseURL + "/" + archiveName; p.URI != want {
		t.Errorf("uri = %q, want %q", p.URI, want)
	}

	// Install as krew does: "download" the uri (its file name in dist),
	// verify the checksum, unpack, copy each files entry, link bin.
	archive, err := os.ReadFile(filepath.Join(dist, filepath.Base(p.URI)))
	if err != nil {
		t.Fatalf("the manifest's uri names %s, which the release did not write: %v", filepath.Base(p.URI), err)
	}
	if got := fmt.Sprintf("%x", sha256.Sum256(archive)); got != p.SHA256 {
		t.Fatalf("the archive's sha256 is %s, the manifest says %s", got, p.SHA256)
	}
	staging := filepath.Join(t.TempDir(), "download")
	unpack(t, archive, staging, commitTime)
	install := filepath.Join(t.TempDir(), "store", m.Metadata.Name, m.Spec.Version)
	if len(p.Files) == 0 {
		t.Fatal("the manifest's platform has no files: krew would install nothing")
	}
	for _, fo := range p.Files {
		matches, err := filepath.Glob(filepath.Join(staging, fo.From))
		if err != nil || len(matches) == 0 {
			t.Fatalf("files: from %q matches nothing in the archive (%v)", fo.From, err)
		}
		for _, src := range matches {
			dst := filepath.Join(install, fo.To, filepath.Base(src))
			copyFile(t, src, dst)
		}
	}
	if _, err := os.Stat(filepath.Join(install, "LICENSE")); err != nil {
		t.Errorf("the installed plugin has no LICENSE: %v", err)
	}
	binDir := filepath.Join(t.TempDir(), "bin")
	if err := os.MkdirAll(binDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(install, p.Bin), filepath.Join(binDir, "kubectl-"+m.Metadata.Name)); err != nil {
		t.Fatal(err)
	}
	path := binDir + string(os.PathListSeparator) + os.Getenv("PATH")

	// The installed plugin reports the release's version and commit.
	wantPlugin := testVersion + " (revision " + head[:12] + ", " + commitTime.Format(time.RFC3339) + ", "
	out := run(t, ctx, path, "kubectl-sandbox", "--version")
	if !strings.HasPrefix(out, "kubectl-sandbox "+wantPlugin) {
		t.Errorf("kubectl-sandbox --version = %q, want it to begin with %q", out, "kubectl-sandbox "+wantPlugin)
	}
	out = run(t, ctx, path, "kubectl", "sandbox", "version", "--client")
	if !strings.HasPrefix(out, "Plugin version:  "+wantPlugin) {
		t.Errorf("kubectl sandbox version --client = %q, want it to begin with %q", out, "Plugin version:  "+wantPlugin)
	}

	// And the manager's: a manager binary of the same version holds its
	// Lease in the manager's namespace.
	kubeconfig, leaseNS, managerLog := startManager(t, ctx, head)
	deadline := time.Now().Add(2 * time.Minute)
	var res struct {
		Plugin struct {
			Version, Revision string
		}
		Managers []struct {
			Namespace, Lease, Holder, Version, Revision string
			Stale                                       bool
		}
	}
	for {
		kubectl, err := lookPath("kubectl", path)
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.CommandContext(ctx, kubectl, "sandbox", "version", "-o", "json", "--kubeconfig", kubeconfig)
		cmd.Env = append(cleanEnv(), "PATH="+path)
		o, err := cmd.Output()
		if err == nil {
			if err := json.Unmarshal(o, &res); err != nil {
				t.Fatalf("kubectl sandbox version -o json: %v\n%s", err, o)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("kubectl sandbox version found no manager within 2 minutes: %v\n%s", err, o)
		}
		time.Sleep(time.Second)
	}
	if res.Plugin.Version != testVersion || res.Plugin.Revision != head {
		t.Errorf("plugin = %+v, want %s %s", res.Plugin, testVersion, head)
	}
	if len(res.Managers) != 1 {
		t.Fatalf("managers = %+v, want the one Lease", res.Managers)
	}
	mv := res.Managers[0]
	if mv.Version != testVersion || mv.Revision != head || mv.Namespace != leaseNS || mv.Holder == "" || mv.Stale {
		t.Errorf("manager = %+v, want version %s, revision %s, a holder, in namespace %s", mv, testVersion, head, leaseNS)
	}
	// The manager logged the same when it started.
	if want := `"msg":"Starting manager","version":"` + testVersion + `","revision":"` + head + `"`; !strings.Contains(managerLog(), want) {
		t.Errorf("the manager's start log lacks %s:\n%s", want, managerLog())
	}
	out = run(t, ctx, path, "kubectl", "sandbox", "version", "--kubeconfig", kubeconfig)
	if want := "Manager version: " + testVersion + " (revision " + head[:12] + "; Lease " + leaseNS + "/"; !strings.Contains(out, want) {
		t.Errorf("kubectl sandbox version:\n%s\nwant a line with %q", out, want)
	}

	// Reproducible: a second build gives the same SHA256SUMS.
	dist2 := filepath.Join(t.TempDir(), "dist")
	second := makeRelease(t, ctx, dist2, head, commitTime)
	s1, _ := os.ReadFile(filepath.Join(dist, "SHA256SUMS"))
	s2, _ := os.ReadFile(filepath.Join(dist2, "SHA256SUMS"))
	if !bytes.Equal(s1, s2) {
		t.Errorf("two builds of one commit differ:\n%s\n%s", s1, s2)
	}
	t.Logf("release builds took %s and %s", first.Round(100*time.Millisecond), second.Round(100*time.Millisecond))
}

// startManager starts the local control plane and the emulator, and a
// manager binary built with the release's version flags and leader election
// on, in the namespace `make deploy` installs it in. It returns an
// administrator's kubeconfig, the Lease's namespace and the manager's output.
func startManager(t *testing.T, ctx context.Context, head string) (string, string, func() string) {
	t.Helper()
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		t.Fatal("KUBEBUILDER_ASSETS is not set: run `make test`, or KUBEBUILDER_ASSETS=$(./hack/envtest.sh) go test ./test/release/")
	}
	stack, err := localstack.Start(ctx, localstack.Options{RepoRoot: root, AssetsDir: assets, Emulator: emulator.Options{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := stack.Stop(); err != nil {
			t.Error(err)
		}
	})
	_, id, err := stack.InstallManagerRBAC(ctx)
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := stack.ControlPlane.WriteAdminKubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	// The version flags make release passes (hack/release), without
	// -trimpath so that the packages compiled for the other tests'
	// manager builds are reused.
	bin := filepath.Join(t.TempDir(), "manager")
	pkg := "github.com/getsentry/sandbox-controller/internal/version"
	ldflags := fmt.Sprintf("-X %[1]s.version=%[2]s -X %[1]s.revision=%[3]s", pkg, testVersion, head)
	build := exec.CommandContext(ctx, "go", "build", "-ldflags", ldflags, "-o", bin, "./cmd/manager")
	build.Dir = root
	build.Env = cleanEnv()
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/manager: %v\n%s", err, out)
	}
	var log lockedBuffer
	cmd := exec.CommandContext(ctx, bin,
		"--kubeconfig="+kubeconfig,
		"--metrics-bind-address=0",
		"--health-probe-bind-address=0",
		"--vercel-api-url="+stack.EmulatorURL,
		"--vercel-team-id="+localstack.TeamID,
		"--vercel-project-id="+localstack.ProjectID,
		"--cluster-id=release-test",
		"--leader-elect",
		"--leader-election-namespace="+id.Namespace,
		"--manager-namespace="+id.Namespace,
	)
	cmd.Env = append(cleanEnv(), "VERCEL_TOKEN="+stack.Emulator.Token())
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("manager output:\n%s", log.String())
		}
	})
	return kubeconfig, id.Namespace, log.String
}

// lockedBuffer is the manager's output, read while the process writes it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// run runs a command with PATH and returns its output, failing the test on error.
func run(t *testing.T, ctx context.Context, path string, name string, args ...string) string {
	t.Helper()
	bin, err := lookPath(name, path)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(cleanEnv(), "PATH="+path)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %q: %v\n%s", name, args, err, out)
	}
	return string(out)
}

// lookPath finds an executable in path, the PATH the command runs with
// (exec.Command looks in this process's PATH).
func lookPath(name, path string) (string, error) {
	for _, dir := range filepath.SplitList(path) {
		p := filepath.Join(dir, name)
		if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s is not on PATH %s", name, path)
}

// unpack extracts the tar.gz into dir, checking that entries are plain
// files with the commit's time.
func unpack(t *testing.T, archive []byte, dir string, mtime time.Time) {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(archive))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Typeflag != tar.TypeReg || !filepath.IsLocal(h.Name) {
			t.Fatalf("archive entry %q (type %c): want plain files only", h.Name, h.Typeflag)
		}
		if !h.ModTime.Equal(mtime) || h.Uid != 0 || h.Gid != 0 {
			t.Errorf("archive entry %s: mtime %s owner %d:%d, want the commit's time %s and root", h.Name, h.ModTime, h.Uid, h.Gid, mtime)
		}
		p := filepath.Join(dir, h.Name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, os.FileMode(h.Mode)&0o777); err != nil {
			t.Fatal(err)
		}
	}
}

func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	st, err := os.Stat(src)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, st.Mode().Perm()); err != nil {
		t.Fatal(err)
	}
}

func fileSHA256(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%x", sha256.Sum256(b))
}
