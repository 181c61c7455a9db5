package main

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/x509"
	"debug/elf"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/google/go-containerregistry/pkg/v1/validate"
	"github.com/moby/patternmatcher"
	"github.com/moby/patternmatcher/ignorefile"
)

// repoRoot is the module root, two directories up from this package.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("no go.mod at %s: %v", root, err)
	}
	return root
}

// testContext ends a little before the test binary's deadline, so a slow
// build fails with its output instead of a panic.
func testContext(t *testing.T) context.Context {
	ctx := t.Context()
	if d, ok := t.Deadline(); ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, d.Add(-10*time.Second))
		t.Cleanup(cancel)
	}
	return ctx
}

// cleanEnv is the environment without make's variables, so that a `make
// test` running this test does not pass its own command line to the inner make.
func cleanEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES", "SOURCE_DATE_EPOCH", "GOOS", "GOARCH":
			continue
		}
		env = append(env, kv)
	}
	return append(env, extra...)
}

// TestMakeImage runs `make image` as a user would, then opens the archive
// both as an OCI layout and as a docker-archive, checks the image config and
// the files of its layer, and runs the /manager taken from the layer.
func TestMakeImage(t *testing.T) {
	root := repoRoot(t)
	dir := t.TempDir()
	const img = "registry.example.com/team/sandbox-controller:v0.0.0-test"
	const epoch = 1700000000
	const version = "v0.0.0-image-test"
	head := gitOutput(t, root, "rev-parse", "HEAD")
	start := time.Now()
	cmd := exec.CommandContext(testContext(t), "make", "--no-print-directory", "-C", root, "image",
		"IMG="+img, "IMAGE_DIR="+dir, "VERSION="+version)
	cmd.Env = cleanEnv(fmt.Sprintf("SOURCE_DATE_EPOCH=%d", epoch))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("make image: %v\n%s", err, out)
	}
	t.Logf("make image took %s:\n%s", time.Since(start).Round(time.Millisecond), out)
	archive := filepath.Join(dir, "sandbox-controller.oci.tar")
	created := time.Unix(epoch, 0).UTC()

	// The archive: an OCI layout plus Docker's manifest.json, nothing else.
	layoutDir := filepath.Join(dir, "layout")
	names := untar(t, archive, layoutDir)
	for _, n := range names[:2] {
		if n != "blobs/" && n != "blobs/sha256/" {
			t.Errorf("archive starts with %q, want the blobs/ directories", n)
		}
	}
	var top []string
	for _, n := range names {
		if !strings.HasPrefix(n, "blobs/") {
			top = append(top, n)
		}
	}
	if want := []string{"index.json", "manifest.json", "oci-layout"}; !slices.Equal(top, want) {
		t.Errorf("archive's top-level files = %q, want %q", top, want)
	}
	if len(names) != 2+3+3 {
		t.Errorf("archive holds %d entries, want 2 directories, 3 blobs (manifest, config, layer) and 3 files: %q", len(names), names)
	}

	// Read back as an OCI image layout.
	lp, err := layout.FromPath(layoutDir)
	if err != nil {
		t.Fatal(err)
	}
	index, err := lp.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	if err := validate.Index(index); err != nil {
		t.Fatalf("the OCI layout's index is invalid: %v", err)
	}
	im, err := index.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != 1 {
		t.Fatalf("index.json lists %d manifests, want 1", len(im.Manifests))
	}
	desc := im.Manifests[0]
	if got := desc.Annotations["org.opencontainers.image.ref.name"]; got != img {
		t.Errorf("ref.name annotation = %q, want %q (podman and skopeo name the image after it)", got, img)
	}
	if got := desc.Annotations["io.containerd.image.name"]; got != img {
		t.Errorf("io.containerd.image.name annotation = %q, want %q", got, img)
	}
	if desc.Platform == nil || desc.Platform.OS != "linux" || desc.Platform.Architecture != runtime.GOARCH {
		t.Errorf("index platform = %+v, want linux/%s", desc.Platform, runtime.GOARCH)
	}
	image, err := index.Image(desc.Digest)
	if err != nil {
		t.Fatal(err)
	}
	// Fast: the layer's bytes are checked below, read once (this test
	// runs under -race, where decompressing is slow).
	if err := validate.Image(image, validate.Fast); err != nil {
		t.Fatalf("the image is invalid (manifest, config and descriptors disagree): %v", err)
	}
	if mt, _ := image.MediaType(); mt != types.OCIManifestSchema1 {
		t.Errorf("manifest media type = %s, want %s", mt, types.OCIManifestSchema1)
	}
	if !strings.Contains(string(out), desc.Digest.String()) {
		t.Errorf("make image's output does not name the manifest digest %s", desc.Digest)
	}

	// The same image through the docker-archive view of the file.
	tag, err := name.NewTag(img)
	if err != nil {
		t.Fatal(err)
	}
	dockerImage, err := tarball.ImageFromPath(archive, &tag)
	if err != nil {
		t.Fatalf("read the archive as a docker-archive: %v", err)
	}
	if err := validate.Image(dockerImage, validate.Fast); err != nil {
		t.Fatalf("the docker-archive view is invalid: %v", err)
	}
	ociConfig, _ := image.ConfigName()
	dockerConfig, err := dockerImage.ConfigName()
	if err != nil || dockerConfig != ociConfig {
		t.Errorf("docker-archive config = %s (%v), OCI config = %s: the two views must be one image", dockerConfig, err, ociConfig)
	}

	// The config: entrypoint, non-root user, platform, labels, time.
	cf, err := image.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"/manager"}; !slices.Equal(cf.Config.Entrypoint, want) {
		t.Errorf("Entrypoint = %q, want %q", cf.Config.Entrypoint, want)
	}
	if len(cf.Config.Cmd) != 0 {
		t.Errorf("Cmd = %q, want none (the Deployment passes the flags)", cf.Config.Cmd)
	}
	if cf.Config.User != "65532:65532" {
		t.Errorf("User = %q, want 65532:65532 (numeric, so that runAsNonRoot can verify it)", cf.Config.User)
	}
	if cf.Config.WorkingDir != "/" {
		t.Errorf("WorkingDir = %q, want /", cf.Config.WorkingDir)
	}
	if cf.OS != "linux" || cf.Architecture != runtime.GOARCH {
		t.Errorf("platform = %s/%s, want linux/%s", cf.OS, cf.Architecture, runtime.GOARCH)
	}
	if !cf.Created.Time.Equal(created) {
		t.Errorf("Created = %s, want SOURCE_DATE_EPOCH %s", cf.Created.Time, created)
	}
	for k, want := range map[string]string{
		"org.opencontainers.image.source":   "https://github.com/getsentry/sandbox-controller",
		"org.opencontainers.image.version":  version,
		"org.opencontainers.image.revision": head,
		"org.opencontainers.image.created":  created.Format(time.RFC3339),
	} {
		if got := cf.Config.Labels[k]; got != want {
			t.Errorf("label %s = %q, want %q", k, got, want)
		}
	}
	if !slices.Contains(cf.Config.Env, "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt") {
		t.Errorf("Env = %q, want SSL_CERT_FILE set as in distroless", cf.Config.Env)
	}

	// The layer's files.
	layers, err := image.Layers()
	if err != nil {
		t.Fatal(err)
	}
	if len(layers) != 1 {
		t.Fatalf("%d layers, want 1", len(layers))
	}
	if mt, _ := layers[0].MediaType(); mt != types.OCILayer {
		t.Errorf("layer media type = %s, want %s", mt, types.OCILayer)
	}
	// The layer blob is what the manifest says, and its content is the
	// config's diff ID.
	layerDigest, err := layers[0].Digest()
	if err != nil {
		t.Fatal(err)
	}
	blob, err := os.ReadFile(filepath.Join(layoutDir, "blobs", layerDigest.Algorithm, layerDigest.Hex))
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprintf("sha256:%x", sha256.Sum256(blob)); got != layerDigest.String() {
		t.Errorf("layer blob hashes to %s, the manifest says %s", got, layerDigest)
	}
	if size, _ := layers[0].Size(); size != int64(len(blob)) {
		t.Errorf("layer blob is %d bytes, the manifest says %d", len(blob), size)
	}
	files, diffID := readLayer(t, layers[0])
	if len(cf.RootFS.DiffIDs) != 1 || cf.RootFS.DiffIDs[0].String() != diffID {
		t.Errorf("layer content hashes to %s, the config's diff IDs are %v", diffID, cf.RootFS.DiffIDs)
	}
	wantEntries := []string{
		"etc/", "etc/group", "etc/passwd", "etc/ssl/", "etc/ssl/certs/", "etc/ssl/certs/ca-certificates.crt",
		"home/", "home/nonroot/", "manager", "root/", "tmp/",
	}
	var gotEntries []string
	for _, f := range files {
		gotEntries = append(gotEntries, f.h.Name)
		if !f.h.ModTime.Equal(created) {
			t.Errorf("%s: mtime %s, want SOURCE_DATE_EPOCH %s", f.h.Name, f.h.ModTime, created)
		}
	}
	if !slices.Equal(gotEntries, wantEntries) {
		t.Fatalf("layer entries = %q, want %q", gotEntries, wantEntries)
	}
	byName := map[string]layerFile{}
	for _, f := range files {
		byName[f.h.Name] = f
	}
	mgr := byName["manager"]
	if mgr.h.Typeflag != tar.TypeReg || mgr.h.Mode != 0o755 || mgr.h.Uid != 0 || mgr.h.Gid != 0 {
		t.Errorf("/manager: type %c mode %o owner %d:%d, want a regular file 0755 owned by root (the nonroot user can run it, not change it)",
			mgr.h.Typeflag, mgr.h.Mode, mgr.h.Uid, mgr.h.Gid)
	}
	built, err := os.ReadFile(filepath.Join(dir, "manager"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(mgr.b, built) {
		t.Errorf("/manager in the layer differs from the binary make built (%d vs %d bytes)", len(mgr.b), len(built))
	}
	hostCA, err := os.ReadFile("/etc/ssl/certs/ca-certificates.crt")
	if err != nil {
		t.Fatal(err)
	}
	ca := byName["etc/ssl/certs/ca-certificates.crt"]
	if !bytes.Equal(ca.b, hostCA) || !x509.NewCertPool().AppendCertsFromPEM(ca.b) {
		t.Errorf("the layer's CA bundle (%d bytes) is not the build machine's parseable bundle (%d bytes)", len(ca.b), len(hostCA))
	}
	if h := byName["tmp/"].h; h.Mode != 0o1777 {
		t.Errorf("/tmp mode %o, want 1777", h.Mode)
	}
	if h := byName["home/nonroot/"].h; h.Uid != 65532 || h.Gid != 65532 || h.Mode != 0o700 {
		t.Errorf("/home/nonroot owner %d:%d mode %o, want 65532:65532 0700", h.Uid, h.Gid, h.Mode)
	}
	// The config's user resolves to nonroot in the layer's passwd and group.
	uid, gid, _ := strings.Cut(cf.Config.User, ":")
	if line := findEntry(string(byName["etc/passwd"].b), 2, uid); !strings.HasPrefix(line, "nonroot:x:"+uid+":"+gid+":") || !strings.Contains(line, ":/home/nonroot:") {
		t.Errorf("/etc/passwd entry for uid %s = %q, want nonroot with group %s and home /home/nonroot", uid, line, gid)
	}
	if line := findEntry(string(byName["etc/group"].b), 2, gid); !strings.HasPrefix(line, "nonroot:") {
		t.Errorf("/etc/group entry for gid %s = %q, want nonroot", gid, line)
	}

	// The binary from the layer: static (the image has no libc) and runnable.
	bin := filepath.Join(dir, "extracted", "manager")
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, mgr.b, os.FileMode(mgr.h.Mode)); err != nil {
		t.Fatal(err)
	}
	assertStatic(t, bin)
	help := exec.CommandContext(testContext(t), bin, "--help")
	help.Dir = t.TempDir()
	help.Env = []string{} // nothing from this machine: no KUBECONFIG, no VERCEL_TOKEN
	var stdout, stderr bytes.Buffer
	help.Stdout, help.Stderr = &stdout, &stderr
	if err := help.Run(); err != nil {
		t.Fatalf("/manager --help: %v\nstderr:\n%s", err, stderr.String())
	}
	usage := stdout.String() + stderr.String()
	for _, flag := range []string{"-vercel-api-url", "-vercel-token-file", "-leader-elect", "-metrics-bind-address"} {
		if !strings.Contains(usage, flag) {
			t.Errorf("/manager --help does not mention %s:\n%s", flag, usage)
		}
	}
	// The binary reports the version and commit the labels name.
	v, err := exec.CommandContext(testContext(t), bin, "--version").CombinedOutput()
	if err != nil {
		t.Fatalf("/manager --version: %v\n%s", err, v)
	}
	if want := "manager " + version + " (revision " + head[:12] + ", "; !strings.HasPrefix(string(v), want) {
		t.Errorf("/manager --version = %q, want it to begin with %q", v, want)
	}
}

// gitOutput runs git in dir and returns its trimmed output.
func gitOutput(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("git %q: %v", args, err)
	}
	return strings.TrimSpace(string(out))
}

// TestMultiArchitectureIndex builds an image for amd64 and arm64 at once
// (make release): index.json names one image index listing both, each image
// runs its own architecture's binary, and the labels come from the binaries'
// -ldflags, the created time from their commit time when SOURCE_DATE_EPOCH
// is unset.
func TestMultiArchitectureIndex(t *testing.T) {
	t.Setenv("SOURCE_DATE_EPOCH", "")
	const ld = "-X " + versionPkg + ".version=v1.2.3 -X " + versionPkg + ".revision=abc123 -X " + versionPkg + ".commitTime=2024-05-06T07:08:09Z"
	amd, arm := buildTinyFor(t, "amd64", ld), buildTinyFor(t, "arm64", ld)
	dir := t.TempDir()
	archive := filepath.Join(dir, "multi.tar")
	var stdout bytes.Buffer
	if err := run([]string{"-platform", "amd64=" + amd, "-platform", "arm64=" + arm, "-tag", "example.com/multi:v1.2.3", "-out", archive}, &stdout); err != nil {
		t.Fatal(err)
	}
	layoutDir := filepath.Join(dir, "layout")
	names := untar(t, archive, layoutDir)
	if slices.Contains(names, "manifest.json") {
		t.Errorf("a multi-architecture archive carries a docker-archive manifest.json: %q", names)
	}
	lp, err := layout.FromPath(layoutDir)
	if err != nil {
		t.Fatal(err)
	}
	outer, err := lp.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	om, err := outer.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(om.Manifests) != 1 || om.Manifests[0].MediaType != types.OCIImageIndex {
		t.Fatalf("index.json = %+v, want one image index", om.Manifests)
	}
	if got := om.Manifests[0].Annotations["org.opencontainers.image.ref.name"]; got != "example.com/multi:v1.2.3" {
		t.Errorf("ref.name = %q", got)
	}
	if !strings.Contains(stdout.String(), om.Manifests[0].Digest.String()) {
		t.Errorf("output %q does not name the index digest %s", stdout.String(), om.Manifests[0].Digest)
	}
	index, err := outer.ImageIndex(om.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	if err := validate.Index(index); err != nil {
		t.Fatalf("the image index is invalid: %v", err)
	}
	im, err := index.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	var archs []string
	for _, d := range im.Manifests {
		if d.Platform == nil || d.Platform.OS != "linux" {
			t.Fatalf("manifest %s has platform %+v", d.Digest, d.Platform)
		}
		archs = append(archs, d.Platform.Architecture)
		img, err := index.Image(d.Digest)
		if err != nil {
			t.Fatal(err)
		}
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if cf.Architecture != d.Platform.Architecture {
			t.Errorf("image %s: config says %s, the index %s", d.Digest, cf.Architecture, d.Platform.Architecture)
		}
		want := time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC)
		if !cf.Created.Time.Equal(want) {
			t.Errorf("%s: Created = %s, want the binary's commit time %s", d.Platform.Architecture, cf.Created.Time, want)
		}
		for k, v := range map[string]string{labelVersion: "v1.2.3", labelRevision: "abc123", labelCreated: "2024-05-06T07:08:09Z"} {
			if got := cf.Config.Labels[k]; got != v {
				t.Errorf("%s: label %s = %q, want %q", d.Platform.Architecture, k, got, v)
			}
		}
		layers, err := img.Layers()
		if err != nil {
			t.Fatal(err)
		}
		files, _ := readLayer(t, layers[0])
		var bin []byte
		for _, f := range files {
			if f.h.Name == "manager" {
				bin = f.b
			}
		}
		p := filepath.Join(t.TempDir(), "manager")
		if err := os.WriteFile(p, bin, 0o755); err != nil {
			t.Fatal(err)
		}
		ef, err := elf.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		if want := elfMachine[d.Platform.Architecture]; ef.Machine != want {
			t.Errorf("%s image holds a %s binary", d.Platform.Architecture, ef.Machine)
		}
		ef.Close()
	}
	if !slices.Equal(archs, []string{"amd64", "arm64"}) {
		t.Errorf("index lists %q, want amd64 and arm64", archs)
	}

	// Binaries of two builds do not make one image.
	other := buildTinyFor(t, "arm64", "-X "+versionPkg+".version=v9.9.9")
	err = run([]string{"-platform", "amd64=" + amd, "-platform", "arm64=" + other, "-out", filepath.Join(dir, "x.tar")}, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "must be one build") {
		t.Errorf("run with binaries of two versions = %v, want a refusal", err)
	}
}

// TestBuildIsReproducible builds the image twice from the same binary and
// compares the archives byte for byte; a different SOURCE_DATE_EPOCH changes
// the image's time and nothing else.
func TestBuildIsReproducible(t *testing.T) {
	bin := buildTiny(t)
	dir := t.TempDir()
	build := func(out, epoch string) []byte {
		t.Helper()
		t.Setenv("SOURCE_DATE_EPOCH", epoch)
		if err := run([]string{"-binary", bin, "-tag", "example.com/tiny:1", "-out", out}, io.Discard); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	a := build(filepath.Join(dir, "a.tar"), "")
	b := build(filepath.Join(dir, "b.tar"), "")
	if !bytes.Equal(a, b) {
		t.Fatalf("two builds from the same binary differ: sha256 %x vs %x", sha256.Sum256(a), sha256.Sum256(b))
	}
	c := build(filepath.Join(dir, "c.tar"), "1700000000")
	if bytes.Equal(a, c) {
		t.Fatal("SOURCE_DATE_EPOCH did not change the archive")
	}
	img, err := tarball.ImageFromPath(filepath.Join(dir, "c.tar"), nil)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if want := time.Unix(1700000000, 0); !cf.Created.Time.Equal(want) {
		t.Errorf("Created = %s, want %s", cf.Created.Time, want)
	}
	ca, err := tarball.ImageFromPath(filepath.Join(dir, "a.tar"), nil)
	if err != nil {
		t.Fatal(err)
	}
	cfa, err := ca.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if !cfa.Created.Time.Equal(time.Unix(0, 0)) {
		t.Errorf("without SOURCE_DATE_EPOCH, Created = %s, want the Unix epoch", cfa.Created.Time)
	}
}

// TestRefusesBinariesThatCannotRun: the base has no libc and one
// architecture, so a dynamically linked binary or one for another
// architecture is refused before anything is written.
func TestRefusesBinariesThatCannotRun(t *testing.T) {
	dynamic, err := exec.LookPath("true")
	if err != nil {
		t.Fatal(err)
	}
	if !hasInterp(t, dynamic) {
		t.Fatalf("%s is static on this machine; the test needs a dynamically linked ELF binary", dynamic)
	}
	other := "arm64"
	if runtime.GOARCH == "arm64" {
		other = "amd64"
	}
	tiny := buildTiny(t)
	for _, tc := range []struct {
		name, binary, arch, want string
	}{
		{"dynamic", dynamic, runtime.GOARCH, "dynamically linked"},
		{"wrong architecture", tiny, other, "is built for"},
		{"not ELF", "main.go", runtime.GOARCH, "not a linux binary"},
		{"unknown architecture", tiny, "mips128", "unsupported architecture"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "x.tar")
			err := run([]string{"-binary", tc.binary, "-arch", tc.arch, "-out", out}, io.Discard)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("run(%s, %s) = %v, want an error containing %q", tc.binary, tc.arch, err, tc.want)
			}
			if _, err := os.Stat(out); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("an archive was written for a refused binary (stat: %v)", err)
			}
		})
	}
	t.Run("bad SOURCE_DATE_EPOCH", func(t *testing.T) {
		t.Setenv("SOURCE_DATE_EPOCH", "yesterday")
		err := run([]string{"-binary", tiny, "-out", filepath.Join(t.TempDir(), "x.tar")}, io.Discard)
		if err == nil || !strings.Contains(err.Error(), "SOURCE_DATE_EPOCH") {
			t.Fatalf("run = %v, want a SOURCE_DATE_EPOCH error", err)
		}
	})
}

// TestDockerfileMatchesImage: the Dockerfile cannot be built here (no Docker
// daemon), so this checks what can be checked without one: it states the
// same runtime settings as `make image`, builds the binary the same way with
// the Go of go.mod, and its build context (.dockerignore, parsed by Docker's
// own matcher) and COPY lines carry every file of ./cmd/manager's packages.
func TestDockerfileMatchesImage(t *testing.T) {
	root := repoRoot(t)
	stages := parseDockerfile(t, filepath.Join(root, "Dockerfile"))
	if len(stages) != 2 {
		t.Fatalf("Dockerfile has %d stages, want 2 (builder, runtime)", len(stages))
	}
	builder, final := stages[0], stages[1]

	gomod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindSubmatch(gomod)
	if m == nil {
		t.Fatal("no go directive in go.mod")
	}
	if want := "golang:" + string(m[1]) + " AS builder"; builder.from != want {
		t.Errorf("builder stage FROM %q, want %q (go.mod's Go)", builder.from, want)
	}
	var goBuild string
	for _, in := range builder.instructions {
		if in.cmd == "RUN" && strings.Contains(in.args, "go build") {
			goBuild = in.args
		}
	}
	makefile, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	var makeBuild string
	for _, line := range strings.Split(string(makefile), "\n") {
		if strings.Contains(line, "go build") && strings.Contains(line, "$(IMAGE_DIR)/manager") {
			makeBuild = line
		}
	}
	for _, want := range []string{"CGO_ENABLED=0 ", "go build -trimpath -ldflags=", "-s -w ", " ./cmd/manager"} {
		if !strings.Contains(goBuild, want) {
			t.Errorf("Dockerfile's go build %q lacks %q", goBuild, want)
		}
		if !strings.Contains(makeBuild, want) {
			t.Errorf("Makefile's image go build %q lacks %q", makeBuild, want)
		}
	}
	// The Dockerfile sets the version as make does (internal/version).
	for _, v := range []string{"version=${VERSION}", "revision=${REVISION}", "commitTime=${COMMIT_TIME}"} {
		if !strings.Contains(goBuild, "-X "+versionPkg+"."+v) {
			t.Errorf("Dockerfile's go build %q does not pass -X %s.%s", goBuild, versionPkg, v)
		}
	}
	if !strings.Contains(makeBuild, "$(LDFLAGS)") {
		t.Errorf("Makefile's image go build %q does not pass $(LDFLAGS) (the version)", makeBuild)
	}

	if final.from != "gcr.io/distroless/static:nonroot" {
		t.Errorf("runtime stage FROM %q, want gcr.io/distroless/static:nonroot (the layout hack/image reproduces)", final.from)
	}
	got := map[string]string{}
	gotLabels := map[string]string{}
	var finalArgs []string
	for _, in := range final.instructions {
		switch in.cmd {
		case "ARG":
			finalArgs = append(finalArgs, in.args)
		case "LABEL":
			for k, v := range parseLabels(t, in.args) {
				gotLabels[k] = v
			}
		default:
			got[in.cmd] = in.args
		}
	}
	var ep []string
	if err := json.Unmarshal([]byte(got["ENTRYPOINT"]), &ep); err != nil || !slices.Equal(ep, []string{entrypoint}) {
		t.Errorf("ENTRYPOINT %s, want [%q] in exec form (%v)", got["ENTRYPOINT"], entrypoint, err)
	}
	if got["USER"] != user {
		t.Errorf("USER %q, want %q", got["USER"], user)
	}
	if got["WORKDIR"] != workingDir {
		t.Errorf("WORKDIR %q, want %q", got["WORKDIR"], workingDir)
	}
	if got["COPY"] != "--from=builder /workspace/manager "+entrypoint {
		t.Errorf("COPY %q, want the builder's /workspace/manager at %s", got["COPY"], entrypoint)
	}
	wantLabels := maps.Clone(labels)
	wantLabels[labelVersion], wantLabels[labelRevision], wantLabels[labelCreated] = "${VERSION}", "${REVISION}", "${COMMIT_TIME}"
	if !maps.Equal(gotLabels, wantLabels) {
		t.Errorf("Dockerfile labels %v, want hack/image's %v", gotLabels, wantLabels)
	}
	for _, arg := range []string{"VERSION", "REVISION", "COMMIT_TIME"} {
		if !slices.Contains(finalArgs, arg) {
			t.Errorf("the runtime stage does not declare ARG %s, so its LABEL would be empty", arg)
		}
	}

	// The build context and the COPY lines cover the manager's sources.
	f, err := os.Open(filepath.Join(root, ".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	patterns, err := ignorefile.ReadAll(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	pm, err := patternmatcher.New(patterns)
	if err != nil {
		t.Fatal(err)
	}
	excluded := func(file string) bool {
		t.Helper()
		ex, err := pm.MatchesOrParentMatches(file)
		if err != nil {
			t.Fatal(err)
		}
		return ex
	}
	var copied []string
	for _, in := range builder.instructions {
		if in.cmd == "COPY" {
			fields := strings.Fields(in.args)
			copied = append(copied, fields[:len(fields)-1]...)
		}
	}
	needed := append([]string{"go.mod", "go.sum"}, managerSources(t, root)...)
	for _, file := range needed {
		if excluded(file) {
			t.Errorf("%s is needed to build the manager but .dockerignore leaves it out of the build context", file)
		}
		if !slices.ContainsFunc(copied, func(src string) bool {
			return src == file || strings.HasPrefix(file, strings.TrimSuffix(src, "/")+"/")
		}) {
			t.Errorf("%s is needed to build the manager but no COPY of the builder stage (%q) copies it", file, copied)
		}
	}
	for _, file := range []string{".git/config", "bin/manager", "docs/operations.md", "test/e2e/env_test.go", "controllers/suite_test.go", "internal/recipe/testdata/fuzz/x", "examples/junior-client/main.go"} {
		if !excluded(file) {
			t.Errorf(".dockerignore sends %s to the builder", file)
		}
	}
}

// managerSources are the repository files that `go build ./cmd/manager`
// reads, relative to root.
func managerSources(t *testing.T, root string) []string {
	t.Helper()
	cmd := exec.CommandContext(testContext(t), "go", "list", "-deps", "-json", "./cmd/manager")
	cmd.Dir = root
	cmd.Env = cleanEnv()
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	var files []string
	dec := json.NewDecoder(bytes.NewReader(out))
	for dec.More() {
		var p struct {
			Dir                                                   string
			Module                                                *struct{ Main bool }
			GoFiles, CgoFiles, EmbedFiles, SFiles, CFiles, HFiles []string
		}
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		if p.Module == nil || !p.Module.Main {
			continue
		}
		rel, err := filepath.Rel(root, p.Dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, list := range [][]string{p.GoFiles, p.CgoFiles, p.EmbedFiles, p.SFiles, p.CFiles, p.HFiles} {
			for _, f := range list {
				files = append(files, path.Join(filepath.ToSlash(rel), f))
			}
		}
	}
	if len(files) < 10 {
		t.Fatalf("go list found only %d source files of ./cmd/manager: %q", len(files), files)
	}
	return files
}

type dockerInstruction struct{ cmd, args string }

type dockerStage struct {
	from         string
	instructions []dockerInstruction
}

// parseDockerfile splits the Dockerfile into stages and instructions,
// joining continued lines and dropping comments; enough for this file.
func parseDockerfile(t *testing.T, file string) []dockerStage {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var (
		stages []dockerStage
		cur    strings.Builder
	)
	flush := func() {
		line := strings.TrimSpace(cur.String())
		cur.Reset()
		if line == "" {
			return
		}
		cmd, args, _ := strings.Cut(line, " ")
		cmd, args = strings.ToUpper(cmd), strings.TrimSpace(args)
		switch {
		case cmd == "FROM":
			stages = append(stages, dockerStage{from: args})
		case len(stages) == 0:
			if cmd != "ARG" {
				t.Fatalf("Dockerfile: %s before the first FROM", cmd)
			}
		default:
			s := &stages[len(stages)-1]
			s.instructions = append(s.instructions, dockerInstruction{cmd, args})
		}
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(strings.TrimSpace(line), "#") {
			continue
		}
		if rest, ok := strings.CutSuffix(strings.TrimRight(line, " \t"), "\\"); ok {
			cur.WriteString(rest + " ")
			continue
		}
		cur.WriteString(line)
		flush()
	}
	flush()
	return stages
}

// parseLabels reads LABEL's key="value" pairs.
func parseLabels(t *testing.T, args string) map[string]string {
	t.Helper()
	re := regexp.MustCompile(`([A-Za-z0-9._-]+)="([^"]*)"`)
	out := map[string]string{}
	for _, m := range re.FindAllStringSubmatch(args, -1) {
		out[m[1]] = m[2]
	}
	if rest := strings.TrimSpace(re.ReplaceAllString(args, "")); rest != "" {
		t.Fatalf("LABEL %q: cannot read %q (write key=\"value\" pairs)", args, rest)
	}
	return out
}

// buildTiny builds a small static Go program for this machine's
// architecture: a binary the tool accepts, quicker to build than the manager.
func buildTiny(t *testing.T) string {
	t.Helper()
	return buildTinyFor(t, runtime.GOARCH, "")
}

// buildTinyFor builds the small program for linux/arch with these -ldflags.
func buildTinyFor(t *testing.T, arch, ldflags string) string {
	t.Helper()
	dir := t.TempDir()
	src := filepath.Join(dir, "main.go")
	if err := os.WriteFile(src, []byte("package main\n\nfunc main() { println(\"tiny\") }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "tiny")
	args := []string{"build", "-trimpath", "-o", bin, src}
	if ldflags != "" {
		// Without -trimpath, so that Go records the -ldflags in the build
		// info, where hack/image reads the version from.
		args = []string{"build", "-ldflags", ldflags, "-o", bin, src}
	}
	cmd := exec.CommandContext(testContext(t), "go", args...)
	cmd.Dir = dir
	cmd.Env = cleanEnv("CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build tiny: %v\n%s", err, out)
	}
	return bin
}

type layerFile struct {
	h *tar.Header
	b []byte
}

// readLayer returns the layer's entries and the sha256 of its uncompressed
// content (its diff ID).
func readLayer(t *testing.T, l v1.Layer) ([]layerFile, string) {
	t.Helper()
	rc, err := l.Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	var files []layerFile
	h256 := sha256.New()
	tr := tar.NewReader(io.TeeReader(rc, h256))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			// The end-of-archive blocks and padding count too.
			if _, err := io.Copy(io.Discard, tr); err != nil {
				t.Fatal(err)
			}
			if _, err := io.Copy(h256, rc); err != nil {
				t.Fatal(err)
			}
			return files, fmt.Sprintf("sha256:%x", h256.Sum(nil))
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, layerFile{h, b})
	}
}

// untar extracts the archive into dir and returns its entry names in order.
func untar(t *testing.T, archive, dir string) []string {
	t.Helper()
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var names []string
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return names
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
		if !filepath.IsLocal(h.Name) {
			t.Fatalf("archive entry %q escapes the layout directory", h.Name)
		}
		p := filepath.Join(dir, h.Name)
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, b, 0o644); err != nil {
				t.Fatal(err)
			}
		default:
			t.Fatalf("archive entry %q has type %c, want only files and directories", h.Name, h.Typeflag)
		}
	}
}

// findEntry returns the line of a passwd/group file whose field (0-based) is value.
func findEntry(content string, field int, value string) string {
	for _, line := range strings.Split(content, "\n") {
		if f := strings.Split(line, ":"); len(f) > field && f[field] == value {
			return line
		}
	}
	return ""
}

func hasInterp(t *testing.T, file string) bool {
	t.Helper()
	f, err := elf.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return true
		}
	}
	return false
}

func assertStatic(t *testing.T, file string) {
	t.Helper()
	if hasInterp(t, file) {
		t.Errorf("%s has an ELF interpreter: it is dynamically linked and cannot run on distroless static", file)
	}
	f, err := elf.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if libs, err := f.ImportedLibraries(); err != nil || len(libs) > 0 {
		t.Errorf("%s needs shared libraries %v (%v)", file, libs, err)
	}
}
