// Command release builds what a release publishes into one directory
// (`make release`, dist/):
//
//   - kubectl-sandbox_<os>_<arch>.tar.gz for linux and darwin on amd64 and
//     arm64: the plugin (CGO_ENABLED=0, -trimpath) and LICENSE;
//   - sandbox.yaml, the krew manifest (plugins/krew/sandbox.yaml) with each
//     archive's URL under -release-url and its sha256;
//   - sandbox-controller.oci.tar, the manager image for linux/amd64 and
//     linux/arm64 as one OCI image index (hack/image; no Docker);
//   - install.yaml, what `make deploy` applies, with the image set to -img;
//   - sandbox-controller-<version>.tgz, the Helm chart packaged with bin/helm,
//     its image set to -img;
//   - SHA256SUMS of all of them.
//
// The output is reproducible: every timestamp is the commit's time
// (SOURCE_DATE_EPOCH), archives list their files in a fixed order with
// fixed owners, and the binaries are built with -trimpath and without VCS
// stamping (the version comes from -ldflags), so two runs on one commit
// give the same SHA256SUMS.
package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"sigs.k8s.io/yaml"
)

const versionPkg = "github.com/getsentry/sandbox-controller/internal/version"

// Every part of a release, in build order.
var allParts = []string{"plugin", "image", "install", "chart"}

type options struct {
	root, out                   string
	version, revision           string
	created                     time.Time
	releaseURL                  string
	img                         name.Tag
	kustomize, helm             string
	parts                       map[string]bool
	pluginPlatforms, imageArchs []string
	log                         io.Writer
}

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(1)
	}
}

func run(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("release", flag.ContinueOnError)
	out := fs.String("out", "dist", "Directory to write the release into (emptied first).")
	ver := fs.String("version", "", "Release version, e.g. v0.1.0 (required).")
	rev := fs.String("revision", "", "Commit the release is built from (required).")
	releaseURL := fs.String("release-url", "", "Base URL the archives are downloaded from; the krew manifest's uris are <release-url>/<archive> (required for the plugin).")
	img := fs.String("img", "", "Image reference of the release, e.g. ghcr.io/getsentry/sandbox-controller:v0.1.0 (required for image, install and chart).")
	kustomize := fs.String("kustomize", "bin/kustomize", "kustomize binary (install).")
	helm := fs.String("helm", "bin/helm", "helm binary (chart).")
	parts := fs.String("parts", strings.Join(allParts, ","), "Comma-separated parts to build: "+strings.Join(allParts, ", ")+".")
	platforms := fs.String("plugin-platforms", "linux/amd64,linux/arm64,darwin/amd64,darwin/arm64", "GOOS/GOARCH of the plugin archives.")
	archs := fs.String("image-archs", "amd64,arm64", "Architectures of the image index.")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	root, err := os.Getwd()
	if err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		return errors.New("run from the repository root (make release)")
	}
	o := options{
		root: root, out: *out, version: *ver, revision: *rev, releaseURL: strings.TrimSuffix(*releaseURL, "/"),
		kustomize: *kustomize, helm: *helm, parts: map[string]bool{}, log: stdout,
		pluginPlatforms: strings.Split(*platforms, ","), imageArchs: strings.Split(*archs, ","),
	}
	if o.version == "" || o.revision == "" {
		return errors.New("-version and -revision are required")
	}
	epoch := os.Getenv("SOURCE_DATE_EPOCH")
	sec, err := strconv.ParseInt(epoch, 10, 64)
	if err != nil || sec <= 0 {
		return fmt.Errorf("SOURCE_DATE_EPOCH=%q: set it to the commit's time (git log -1 --format=%%ct), the time of every file of the release", epoch)
	}
	o.created = time.Unix(sec, 0).UTC()
	for _, p := range strings.Split(*parts, ",") {
		if !slices.Contains(allParts, p) {
			return fmt.Errorf("-parts: unknown part %q (want %s)", p, strings.Join(allParts, ", "))
		}
		o.parts[p] = true
	}
	if o.parts["plugin"] && o.releaseURL == "" {
		return errors.New("-release-url is required for the plugin's krew manifest")
	}
	if o.parts["image"] || o.parts["install"] || o.parts["chart"] {
		if o.img, err = name.NewTag(*img, name.StrictValidation); err != nil {
			return fmt.Errorf("-img %q: %w (a reference with a tag, e.g. ghcr.io/getsentry/sandbox-controller:%s)", *img, err, o.version)
		}
	}
	return release(o)
}

func release(o options) error {
	start := time.Now()
	if err := os.RemoveAll(o.out); err != nil {
		return err
	}
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return err
	}
	work, err := os.MkdirTemp("", "release-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	step := func(part string, f func() error) error {
		if !o.parts[part] {
			return nil
		}
		t := time.Now()
		if err := f(); err != nil {
			return fmt.Errorf("%s: %w", part, err)
		}
		fmt.Fprintf(o.log, "release: %s done in %s\n", part, time.Since(t).Round(100*time.Millisecond))
		return nil
	}
	if err := step("plugin", func() error { return o.plugin(work) }); err != nil {
		return err
	}
	if err := step("image", func() error { return o.image(work) }); err != nil {
		return err
	}
	if err := step("install", o.install); err != nil {
		return err
	}
	if err := step("chart", func() error { return o.chart(work) }); err != nil {
		return err
	}
	if err := o.sums(); err != nil {
		return err
	}
	fmt.Fprintf(o.log, "release: %s %s in %s (%s)\n", o.version, o.revision, o.out, time.Since(start).Round(100*time.Millisecond))
	return nil
}

// ldflags set internal/version; -s -w leave out the symbol table and DWARF.
func (o options) ldflags() string {
	return fmt.Sprintf("-s -w -X %[1]s.version=%[2]s -X %[1]s.revision=%[3]s -X %[1]s.commitTime=%[4]s",
		versionPkg, o.version, o.revision, o.created.Format(time.RFC3339))
}

// goBuild builds pkg for goos/goarch into out, reproducibly: no cgo, no
// paths of this machine (-trimpath), no VCS stamp (whose "modified" bit
// would depend on the work tree rather than the sources).
func (o options) goBuild(goos, goarch, pkg, out string) error {
	cmd := exec.Command("go", "build", "-trimpath", "-buildvcs=false", "-ldflags", o.ldflags(), "-o", out, pkg)
	cmd.Dir = o.root
	cmd.Env = append(cleanEnv(), "CGO_ENABLED=0", "GOOS="+goos, "GOARCH="+goarch)
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s for %s/%s: %w\n%s", pkg, goos, goarch, err, b)
	}
	return nil
}

// cleanEnv is the environment without what would change a build's output
// or a tool's behaviour behind the flags' back.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "GOOS", "GOARCH", "CGO_ENABLED", "GOFLAGS", "MAKEFLAGS", "MFLAGS", "MAKELEVEL":
			continue
		}
		env = append(env, kv)
	}
	return env
}

// PluginArchive is the archive name of the plugin for goos/goarch.
func PluginArchive(goos, goarch string) string {
	return fmt.Sprintf("kubectl-sandbox_%s_%s.tar.gz", goos, goarch)
}

// plugin builds the plugin archives and the krew manifest naming them.
func (o options) plugin(work string) error {
	license, err := os.ReadFile(filepath.Join(o.root, "LICENSE"))
	if err != nil {
		return err
	}
	sums := map[string]string{} // "os/arch" → sha256
	for _, p := range o.pluginPlatforms {
		goos, goarch, ok := strings.Cut(p, "/")
		if !ok {
			return fmt.Errorf("platform %q: want GOOS/GOARCH", p)
		}
		bin := filepath.Join(work, "plugin", goos+"_"+goarch, "kubectl-sandbox")
		if err := o.goBuild(goos, goarch, "./cmd/kubectl-sandbox", bin); err != nil {
			return err
		}
		b, err := os.ReadFile(bin)
		if err != nil {
			return err
		}
		archive, err := tarGz(o.created, []tarFile{
			{name: "kubectl-sandbox", mode: 0o755, data: b},
			{name: "LICENSE", mode: 0o644, data: license},
		})
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(o.out, PluginArchive(goos, goarch)), archive, 0o644); err != nil {
			return err
		}
		sums[p] = fmt.Sprintf("%x", sha256.Sum256(archive))
	}
	manifest, err := o.krewManifest(sums)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(o.out, "sandbox.yaml"), manifest, 0o644)
}

type tarFile struct {
	name string
	mode int64
	data []byte
}

// tarGz is a gzipped tar of files in the given order, owned by root, every
// timestamp mtime; the gzip header carries no name or time.
func tarGz(mtime time.Time, files []tarFile) ([]byte, error) {
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	tw := tar.NewWriter(zw)
	for _, f := range files {
		h := &tar.Header{Typeflag: tar.TypeReg, Name: f.name, Mode: f.mode, Size: int64(len(f.data)), ModTime: mtime, Format: tar.FormatUSTAR}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// krewManifest fills plugins/krew/sandbox.yaml in: the version, and for
// each platform built the archive's URL and sha256. The committed file says
// which platforms there are and what the archive holds (files, bin); a
// platform built without an entry there is an error, and one not built
// (-plugin-platforms narrower than the default, as test/release does) is
// left out of the manifest.
func (o options) krewManifest(sums map[string]string) ([]byte, error) {
	src := filepath.Join(o.root, "plugins", "krew", "sandbox.yaml")
	b, err := os.ReadFile(src)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := yaml.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("%s: %w", src, err)
	}
	spec, _ := m["spec"].(map[string]any)
	if spec == nil {
		return nil, fmt.Errorf("%s has no spec", src)
	}
	spec["version"] = o.version
	platforms, _ := spec["platforms"].([]any)
	seen := map[string]bool{}
	var kept []any
	for _, p := range platforms {
		pm, _ := p.(map[string]any)
		sel, _ := pm["selector"].(map[string]any)
		labels, _ := sel["matchLabels"].(map[string]any)
		goos, _ := labels["os"].(string)
		goarch, _ := labels["arch"].(string)
		key := goos + "/" + goarch
		sum, ok := sums[key]
		if !ok {
			fmt.Fprintf(o.log, "release: the krew manifest leaves out %s (not in -plugin-platforms)\n", key)
			continue
		}
		seen[key] = true
		pm["uri"] = o.releaseURL + "/" + PluginArchive(goos, goarch)
		pm["sha256"] = sum
		kept = append(kept, pm)
	}
	spec["platforms"] = kept
	for key := range sums {
		if !seen[key] {
			return nil, fmt.Errorf("the plugin was built for %s, which %s does not list", key, src)
		}
	}
	out, err := yaml.Marshal(m)
	if err != nil {
		return nil, err
	}
	return append([]byte("# The krew manifest of kubectl-sandbox "+o.version+", written by `make release` from plugins/krew/sandbox.yaml.\n"), out...), nil
}

// image builds the manager for each architecture and assembles the
// multi-architecture image with hack/image.
func (o options) image(work string) error {
	args := []string{"run", "./hack/image", "-tag", o.img.String(), "-out", filepath.Join(o.out, "sandbox-controller.oci.tar"),
		"-version", o.version, "-revision", o.revision}
	for _, arch := range o.imageArchs {
		bin := filepath.Join(work, "image", arch, "manager")
		if err := o.goBuild("linux", arch, "./cmd/manager", bin); err != nil {
			return err
		}
		args = append(args, "-platform", arch+"="+bin)
	}
	cmd := exec.Command("go", args...)
	cmd.Dir = o.root
	cmd.Env = append(cleanEnv(), fmt.Sprintf("SOURCE_DATE_EPOCH=%d", o.created.Unix()))
	cmd.Stdout, cmd.Stderr = o.log, os.Stderr
	return cmd.Run()
}

// install writes install.yaml: what `make deploy` applies (config/default
// through hack/render-deploy.sh), with the release's image.
func (o options) install() error {
	cmd := exec.Command(filepath.Join(o.root, "hack", "render-deploy.sh"), o.kustomize, o.img.String())
	cmd.Dir = o.root
	cmd.Stderr = os.Stderr
	b, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("hack/render-deploy.sh: %w", err)
	}
	header := "# sandbox-controller " + o.version + ": everything `make deploy` applies (config/default), image " + o.img.String() + ".\n" +
		"# kubectl apply --server-side -f install.yaml   (README: Install on a cluster)\n"
	return os.WriteFile(filepath.Join(o.out, "install.yaml"), append([]byte(header), b...), 0o644)
}

// chartDir is the chart the release packages.
const chartDir = "charts/sandbox-controller"

// chart packages the Helm chart with bin/helm: chart version the release's
// semantic version (no "v"), appVersion the image tag, image.repository the
// release's. helm package stamps the current time on every entry, so the
// archive is then rewritten with the commit's time.
func (o options) chart(work string) error {
	src := filepath.Join(o.root, chartDir)
	dst := filepath.Join(work, "chart", filepath.Base(chartDir))
	if err := os.CopyFS(dst, os.DirFS(src)); err != nil {
		return err
	}
	values := filepath.Join(dst, "values.yaml")
	b, err := os.ReadFile(values)
	if err != nil {
		return err
	}
	const repoLine = "\n  repository: sandbox-controller\n"
	if bytes.Count(b, []byte(repoLine)) != 1 {
		return fmt.Errorf("%s/values.yaml: expected one line %q to set the release's image repository", chartDir, strings.TrimSpace(repoLine))
	}
	b = bytes.Replace(b, []byte(repoLine), []byte("\n  repository: "+o.img.Context().Name()+"\n"), 1)
	if err := os.WriteFile(values, b, 0o644); err != nil {
		return err
	}
	chartVersion := strings.TrimPrefix(o.version, "v")
	pkgDir := filepath.Join(work, "chart-package")
	cmd := exec.Command(o.helm, "package", dst, "--version", chartVersion, "--app-version", o.img.TagStr(), "--destination", pkgDir)
	cmd.Env = cleanEnv()
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("helm package: %w\n%s", err, out)
	}
	file := fmt.Sprintf("%s-%s.tgz", filepath.Base(chartDir), chartVersion)
	packaged, err := os.ReadFile(filepath.Join(pkgDir, file))
	if err != nil {
		return err
	}
	fixed, err := retime(packaged, o.created)
	if err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	return os.WriteFile(filepath.Join(o.out, file), fixed, 0o644)
}

// retime rewrites a .tgz with every entry's time set to mtime (and access
// and change times dropped), keeping order, names, modes and contents, and
// the gzip header's extra field (helm marks its archives there).
func retime(tgz []byte, mtime time.Time) ([]byte, error) {
	zr, err := gzip.NewReader(bytes.NewReader(tgz))
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	zw.Extra = zr.Extra
	tr, tw := tar.NewReader(zr), tar.NewWriter(zw)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		h.ModTime, h.AccessTime, h.ChangeTime = mtime, time.Time{}, time.Time{}
		h.Uname, h.Gname, h.Uid, h.Gid = "", "", 0, 0
		h.Format = tar.FormatUnknown
		h.PAXRecords = nil
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := io.Copy(tw, tr); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// sums writes SHA256SUMS (sha256sum's format, `sha256sum -c SHA256SUMS`
// checks it) of every file in the output directory, by name.
func (o options) sums() error {
	entries, err := os.ReadDir(o.out)
	if err != nil {
		return err
	}
	var b strings.Builder
	for _, e := range entries {
		if e.IsDir() || e.Name() == "SHA256SUMS" {
			continue
		}
		data, err := os.ReadFile(filepath.Join(o.out, e.Name()))
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "%x  %s\n", sha256.Sum256(data), e.Name())
	}
	return os.WriteFile(filepath.Join(o.out, "SHA256SUMS"), []byte(b.String()), 0o644)
}
