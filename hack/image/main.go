// Command image assembles the manager's container image without a Docker
// daemon or registry access: one layer holding the static manager binary at
// /manager, the build machine's CA certificates and a nonroot user (65532),
// the same layout as the Dockerfile's distroless static:nonroot stage. It
// writes an OCI image layout as a tar (podman load, skopeo copy
// oci-archive:..., containerd/Docker load) that also carries the manifest.json
// of a docker-archive, so the classic `docker load` reads the same file.
//
// With -platform ARCH=BINARY given once per architecture (`make release`:
// amd64 and arm64) it writes a multi-architecture image instead: index.json
// names one OCI image index, which lists one image per architecture (podman
// load, skopeo copy --all oci-archive:..., crane push); there is no
// docker-archive manifest.json then.
//
// The image config carries the OCI labels version, revision and created
// (org.opencontainers.image.*): -version and -revision, else what the
// binary's build info says (the -ldflags -X of internal/version, or
// vcs.revision). Every timestamp, and the created label, is
// $SOURCE_DATE_EPOCH (make passes the commit's time), else the commit time
// the binary records, else the Unix epoch.
//
// `make image` builds the binary and runs this command. The output is
// reproducible: the same binaries and timestamp give the same bytes.
package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/x509"
	"debug/buildinfo"
	"debug/elf"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The image's runtime settings. The Dockerfile states the same ones
// (TestDockerfileMatchesImage compares them).
const (
	entrypoint = "/manager"
	user       = "65532:65532"
	workingDir = "/"
	// caPath is where Go's crypto/x509 (and distroless) look for the bundle.
	caPath = "/etc/ssl/certs/ca-certificates.crt"
)

// labels are the image config's fixed labels, the Dockerfile's LABEL lines;
// buildLabels adds the build's own (dynamicLabels).
var labels = map[string]string{
	"org.opencontainers.image.title":       "sandbox-controller",
	"org.opencontainers.image.description": "Kubernetes operator for Vercel Sandboxes",
	"org.opencontainers.image.source":      "https://github.com/getsentry/sandbox-controller",
	"org.opencontainers.image.url":         "https://github.com/getsentry/sandbox-controller",
}

// The labels that say which build the image holds. The Dockerfile sets them
// from its build arguments (VERSION, REVISION, CREATED).
const (
	labelVersion  = "org.opencontainers.image.version"
	labelRevision = "org.opencontainers.image.revision"
	labelCreated  = "org.opencontainers.image.created"
)

// versionPkg is where -ldflags -X sets the version (internal/version).
const versionPkg = "github.com/getsentry/sandbox-controller/internal/version"

// env matches distroless's, so the two images behave alike.
var env = []string{
	"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
	"SSL_CERT_FILE=" + caPath,
}

// The users and groups of distroless static:nonroot that matter here.
const (
	passwd = "root:x:0:0:root:/root:/sbin/nologin\n" +
		"nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n" +
		"nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"
	group = "root:x:0:\n" +
		"nobody:x:65534:\n" +
		"nonroot:x:65532:\n"
)

// elfMachine is the ELF machine a binary for each GOARCH declares.
var elfMachine = map[string]elf.Machine{
	"amd64":   elf.EM_X86_64,
	"arm64":   elf.EM_AARCH64,
	"arm":     elf.EM_ARM,
	"386":     elf.EM_386,
	"ppc64le": elf.EM_PPC64,
	"s390x":   elf.EM_S390,
	"riscv64": elf.EM_RISCV,
}

type options struct {
	binary   string    // the static linux manager binary
	arch     string    // its GOARCH, the image's architecture
	caBundle string    // PEM bundle copied to caPath
	tag      name.Tag  // the image's name in the archive
	out      string    // archive path
	created  time.Time // every timestamp in the image and archive
	labels   map[string]string
}

// platform is one architecture of a multi-architecture image.
type platform struct{ arch, binary string }

// platformFlag collects -platform ARCH=BINARY values.
type platformFlag []platform

func (p *platformFlag) String() string { return fmt.Sprint(*p) }

func (p *platformFlag) Set(v string) error {
	arch, bin, ok := strings.Cut(v, "=")
	if !ok || arch == "" || bin == "" {
		return fmt.Errorf("%q: want ARCH=BINARY, e.g. arm64=bin/linux_arm64/manager", v)
	}
	for _, q := range *p {
		if q.arch == arch {
			return fmt.Errorf("architecture %s given twice", arch)
		}
	}
	*p = append(*p, platform{arch, bin})
	return nil
}

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

func run(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("image", flag.ContinueOnError)
	binary := fs.String("binary", "", "Static linux manager binary to put at /manager (required).")
	arch := fs.String("arch", runtime.GOARCH, "GOARCH of the binary; the image's architecture.")
	caBundle := fs.String("ca-bundle", "/etc/ssl/certs/ca-certificates.crt", "PEM CA bundle of the build machine, copied to "+caPath+".")
	tag := fs.String("tag", "sandbox-controller:latest", "Image reference recorded in the archive (make's IMG).")
	out := fs.String("out", "bin/image/sandbox-controller.oci.tar", "Archive to write.")
	var platforms platformFlag
	fs.Var(&platforms, "platform", "ARCH=BINARY, once per architecture of a multi-architecture image (instead of -binary and -arch).")
	ver := fs.String("version", "", "Label "+labelVersion+" (default: the version the binary's -ldflags set).")
	rev := fs.String("revision", "", "Label "+labelRevision+" (default: the commit the binary's build info names).")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	switch {
	case *binary == "" && len(platforms) == 0:
		return errors.New("-binary (or -platform ARCH=BINARY per architecture) is required")
	case *binary != "" && len(platforms) > 0:
		return errors.New("give either -binary (and -arch) or -platform, not both")
	case *binary != "":
		platforms = platformFlag{{*arch, *binary}}
	}
	t, err := name.NewTag(*tag)
	if err != nil {
		return fmt.Errorf("-tag %q: %w (a tag reference, e.g. ghcr.io/org/sandbox-controller:v1)", *tag, err)
	}
	created, fromEnv, err := sourceDateEpoch()
	if err != nil {
		return err
	}
	var bins []string
	for _, p := range platforms {
		bins = append(bins, p.binary)
	}
	build, err := buildOf(bins, *ver, *rev)
	if err != nil {
		return err
	}
	if !fromEnv && !build.commitTime.IsZero() {
		created = build.commitTime
	}

	var images []v1.Image
	var names []string
	for _, p := range platforms {
		o := options{binary: p.binary, arch: p.arch, caBundle: *caBundle, tag: t, out: *out, created: created, labels: buildLabels(build, created)}
		img, err := buildImage(o)
		if err != nil {
			return err
		}
		images = append(images, img)
		names = append(names, "linux/"+p.arch)
	}
	digest, err := writeArchive(*out, images, t, created)
	if err != nil {
		return err
	}
	st, err := os.Stat(*out)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "Wrote %s: %s %s %s (%.1f MB)\n", *out, familiarName(t), strings.Join(names, ","), digest, float64(st.Size())/1e6)
	return nil
}

// build is what the image's labels say about the binaries.
type build struct {
	version, revision string
	commitTime        time.Time // zero when unknown
}

// buildOf reads version, revision and commit time from the binaries' build
// info (vcs.*, and the -ldflags of internal/version, which Go records only
// for builds without -trimpath); the flags win. Binaries of one image must
// come from one build.
func buildOf(binaries []string, version, revision string) (build, error) {
	var b build
	for i, path := range binaries {
		bi, err := buildinfo.ReadFile(path)
		if err != nil {
			continue // checkBinary reports what is wrong with it
		}
		var got build
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				got.revision = s.Value
			case "vcs.time":
				got.commitTime, _ = time.Parse(time.RFC3339, s.Value)
			case "-ldflags":
				for _, f := range strings.Fields(s.Value) {
					if v, ok := strings.CutPrefix(f, versionPkg+".version="); ok {
						got.version = v
					}
					if v, ok := strings.CutPrefix(f, versionPkg+".revision="); ok {
						got.revision = v
					}
					if v, ok := strings.CutPrefix(f, versionPkg+".commitTime="); ok {
						got.commitTime, _ = time.Parse(time.RFC3339, v)
					}
				}
			}
		}
		if i > 0 && (got.version != b.version || got.revision != b.revision) {
			return b, fmt.Errorf("%s is version %q of commit %q, %s is %q of %q: the architectures of one image must be one build", path, got.version, got.revision, binaries[0], b.version, b.revision)
		}
		b = got
	}
	if version != "" {
		b.version = version
	}
	if revision != "" {
		b.revision = revision
	}
	return b, nil
}

// buildLabels are labels plus the build's version, revision and time
// (those unknown are left out rather than set empty).
func buildLabels(b build, created time.Time) map[string]string {
	l := maps.Clone(labels)
	if b.version != "" {
		l[labelVersion] = b.version
	}
	if b.revision != "" {
		l[labelRevision] = b.revision
	}
	if created.Unix() > 0 {
		l[labelCreated] = created.UTC().Format(time.RFC3339)
	}
	return l
}

// sourceDateEpoch is the reproducible-builds timestamp: $SOURCE_DATE_EPOCH
// when set (set is true), else the Unix epoch.
func sourceDateEpoch() (t time.Time, set bool, err error) {
	s := os.Getenv("SOURCE_DATE_EPOCH")
	if s == "" {
		return time.Unix(0, 0).UTC(), false, nil
	}
	sec, err := strconv.ParseInt(s, 10, 64)
	if err != nil || sec < 0 {
		return time.Time{}, false, fmt.Errorf("SOURCE_DATE_EPOCH=%q is not a non-negative integer of seconds", s)
	}
	return time.Unix(sec, 0).UTC(), true, nil
}

// buildImage returns the single-layer image.
func buildImage(o options) (v1.Image, error) {
	if err := checkBinary(o.binary, o.arch); err != nil {
		return nil, err
	}
	ca, err := os.ReadFile(o.caBundle)
	if err != nil {
		return nil, fmt.Errorf("read the CA bundle: %w (install ca-certificates or pass CA_BUNDLE)", err)
	}
	if !x509.NewCertPool().AppendCertsFromPEM(ca) {
		return nil, fmt.Errorf("CA bundle %s holds no PEM certificate", o.caBundle)
	}
	bin, err := os.ReadFile(o.binary)
	if err != nil {
		return nil, err
	}
	layerTar, err := rootfs(bin, ca, o.created)
	if err != nil {
		return nil, err
	}
	// Compressed here, once: the layer's digest and the archive's blob are
	// the same bytes, and compress/gzip's output is deterministic.
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	if _, err := zw.Write(layerTar); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(gz.Bytes())), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, err
	}

	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.ConfigFile(img, &v1.ConfigFile{
		Created:      v1.Time{Time: o.created},
		Architecture: o.arch,
		OS:           "linux",
		Config: v1.Config{
			Entrypoint: []string{entrypoint},
			User:       user,
			WorkingDir: workingDir,
			Env:        env,
			Labels:     o.labels,
		},
		RootFS: v1.RootFS{Type: "layers"},
	})
	if err != nil {
		return nil, err
	}
	return mutate.Append(img, mutate.Addendum{
		Layer: layer,
		History: v1.History{
			Created:   v1.Time{Time: o.created},
			CreatedBy: "hack/image: /manager, CA certificates, user nonroot (65532)",
		},
	})
}

// checkBinary refuses what would not run on a base without libc: a binary
// for another OS or architecture, or a dynamically linked one.
func checkBinary(path, arch string) error {
	want, ok := elfMachine[arch]
	if !ok {
		return fmt.Errorf("unsupported architecture %q", arch)
	}
	f, err := elf.Open(path)
	if err != nil {
		return fmt.Errorf("%s is not a linux binary: %w", path, err)
	}
	defer f.Close()
	if f.Machine != want {
		return fmt.Errorf("%s is built for %s, not %s (GOARCH=%s)", path, f.Machine, want, arch)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("%s is dynamically linked (it has an ELF interpreter); the image has no libc: build it with CGO_ENABLED=0", path)
		}
	}
	if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
		return fmt.Errorf("%s needs shared libraries %v; build it with CGO_ENABLED=0", path, libs)
	}
	if bi, err := buildinfo.ReadFile(path); err == nil {
		for _, s := range bi.Settings {
			if s.Key == "GOOS" && s.Value != "linux" {
				return fmt.Errorf("%s is built for GOOS=%s, not linux", path, s.Value)
			}
		}
	}
	return nil
}

// rootfs is the layer's uncompressed tar: the files of distroless
// static:nonroot that the manager uses, and /manager.
func rootfs(manager, ca []byte, mtime time.Time) ([]byte, error) {
	type entry struct {
		h *tar.Header
		b []byte
	}
	dir := func(name string, mode int64, id int) entry {
		return entry{h: &tar.Header{Typeflag: tar.TypeDir, Name: name, Mode: mode, Uid: id, Gid: id}}
	}
	file := func(name string, mode int64, b []byte) entry {
		return entry{h: &tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(b))}, b: b}
	}
	// In lexical order, parents first; owned by root unless said otherwise.
	entries := []entry{
		dir("etc/", 0o755, 0),
		file("etc/group", 0o644, []byte(group)),
		file("etc/passwd", 0o644, []byte(passwd)),
		dir("etc/ssl/", 0o755, 0),
		dir("etc/ssl/certs/", 0o755, 0),
		file(strings.TrimPrefix(caPath, "/"), 0o644, ca),
		dir("home/", 0o755, 0),
		dir("home/nonroot/", 0o700, 65532),
		file(strings.TrimPrefix(entrypoint, "/"), 0o755, manager),
		dir("root/", 0o700, 0),
		dir("tmp/", 0o1777, 0),
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		e.h.ModTime = mtime
		if err := tw.WriteHeader(e.h); err != nil {
			return nil, fmt.Errorf("layer entry %s: %w", e.h.Name, err)
		}
		if _, err := tw.Write(e.b); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// familiarName is the reference as Docker prints it: Docker Hub's registry
// and library/ prefix left out.
func familiarName(t name.Tag) string {
	repo := t.Context().Name() + ":" + t.TagStr()
	repo = strings.TrimPrefix(repo, name.DefaultRegistry+"/")
	return strings.TrimPrefix(repo, "library/")
}

// fullName is the reference with its registry, as containerd names images.
func fullName(t name.Tag) string {
	reg := t.RegistryStr()
	if reg == name.DefaultRegistry {
		reg = "docker.io"
	}
	return reg + "/" + t.RepositoryStr() + ":" + t.TagStr()
}

// writeArchive writes the images as an OCI image layout in a tar, and returns
// the digest index.json names. One image: index.json names its manifest, and
// the manifest.json of a docker-archive names the same blobs (as `docker
// save` does since Docker 25). Several: index.json names an image index
// listing them, one per platform. The file is replaced atomically.
func writeArchive(path string, imgs []v1.Image, tag name.Tag, mtime time.Time) (v1.Hash, error) {
	blobPath := func(h v1.Hash) string { return "blobs/" + h.Algorithm + "/" + h.Hex }
	refAnnotations := map[string]string{
		// podman and skopeo name the image after ref.name;
		// containerd (and Docker with it) after the full name.
		"org.opencontainers.image.ref.name": familiarName(tag),
		"io.containerd.image.name":          fullName(tag),
	}
	blobs := map[v1.Hash][]byte{} // small blobs: configs, manifests, the index
	type layerBlob struct {
		digest v1.Hash
		layer  v1.Layer
	}
	var layerBlobs []layerBlob
	var descs []v1.Descriptor
	var docker tarball.Manifest
	for _, img := range imgs {
		layers, err := img.Layers()
		if err != nil {
			return v1.Hash{}, err
		}
		rawManifest, err := img.RawManifest()
		if err != nil {
			return v1.Hash{}, err
		}
		manifestDigest, err := img.Digest()
		if err != nil {
			return v1.Hash{}, err
		}
		rawConfig, err := img.RawConfigFile()
		if err != nil {
			return v1.Hash{}, err
		}
		configDigest, err := img.ConfigName()
		if err != nil {
			return v1.Hash{}, err
		}
		cfg, err := img.ConfigFile()
		if err != nil {
			return v1.Hash{}, err
		}
		blobs[manifestDigest], blobs[configDigest] = rawManifest, rawConfig
		descs = append(descs, v1.Descriptor{
			MediaType: types.OCIManifestSchema1,
			Size:      int64(len(rawManifest)),
			Digest:    manifestDigest,
			Platform:  &v1.Platform{OS: cfg.OS, Architecture: cfg.Architecture},
		})
		entry := tarball.Descriptor{Config: blobPath(configDigest), RepoTags: []string{familiarName(tag)}}
		for _, l := range layers {
			d, err := l.Digest()
			if err != nil {
				return v1.Hash{}, err
			}
			layerBlobs = append(layerBlobs, layerBlob{d, l})
			entry.Layers = append(entry.Layers, blobPath(d))
		}
		docker = append(docker, entry)
	}

	var top v1.Descriptor
	if len(imgs) == 1 {
		top = descs[0]
	} else {
		rawIndex, err := json.Marshal(v1.IndexManifest{SchemaVersion: 2, MediaType: types.OCIImageIndex, Manifests: descs})
		if err != nil {
			return v1.Hash{}, err
		}
		d, _, err := v1.SHA256(bytes.NewReader(rawIndex))
		if err != nil {
			return v1.Hash{}, err
		}
		blobs[d] = rawIndex
		top = v1.Descriptor{MediaType: types.OCIImageIndex, Size: int64(len(rawIndex)), Digest: d}
		docker = nil // docker load takes one image per tag
	}
	top.Annotations = refAnnotations
	rawTop, err := json.Marshal(v1.IndexManifest{SchemaVersion: 2, MediaType: types.OCIImageIndex, Manifests: []v1.Descriptor{top}})
	if err != nil {
		return v1.Hash{}, err
	}

	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return v1.Hash{}, err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".image-*.tar")
	if err != nil {
		return v1.Hash{}, err
	}
	defer os.Remove(tmp.Name()) // after the rename, a no-op
	tw := tar.NewWriter(tmp)
	header := func(name string, typ byte, mode, size int64) error {
		return tw.WriteHeader(&tar.Header{Typeflag: typ, Name: name, Mode: mode, Size: size, ModTime: mtime})
	}
	small := func(name string, b []byte) error {
		if err := header(name, tar.TypeReg, 0o644, int64(len(b))); err != nil {
			return err
		}
		_, err := tw.Write(b)
		return err
	}
	if err := header("blobs/", tar.TypeDir, 0o755, 0); err != nil {
		return v1.Hash{}, err
	}
	if err := header("blobs/sha256/", tar.TypeDir, 0o755, 0); err != nil {
		return v1.Hash{}, err
	}
	written := map[v1.Hash]bool{}
	for _, lb := range layerBlobs {
		if written[lb.digest] {
			continue
		}
		written[lb.digest] = true
		size, err := lb.layer.Size()
		if err != nil {
			return v1.Hash{}, err
		}
		rc, err := lb.layer.Compressed()
		if err != nil {
			return v1.Hash{}, err
		}
		if err := header(blobPath(lb.digest), tar.TypeReg, 0o644, size); err != nil {
			rc.Close()
			return v1.Hash{}, err
		}
		_, err = io.Copy(tw, rc)
		rc.Close()
		if err != nil {
			return v1.Hash{}, fmt.Errorf("write layer %s: %w", lb.digest, err)
		}
	}
	// Configs, manifests and the index in a fixed order: by digest.
	smallDigests := slices.SortedFunc(maps.Keys(blobs), func(a, b v1.Hash) int { return strings.Compare(a.String(), b.String()) })
	for _, d := range smallDigests {
		if err := small(blobPath(d), blobs[d]); err != nil {
			return v1.Hash{}, err
		}
	}
	files := []struct {
		name string
		b    []byte
	}{{"index.json", rawTop}}
	if docker != nil {
		rawDocker, err := json.Marshal(docker)
		if err != nil {
			return v1.Hash{}, err
		}
		files = append(files, struct {
			name string
			b    []byte
		}{"manifest.json", rawDocker})
	}
	files = append(files, struct {
		name string
		b    []byte
	}{"oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)})
	for _, f := range files {
		if err := small(f.name, f.b); err != nil {
			return v1.Hash{}, err
		}
	}
	if err := tw.Close(); err != nil {
		return v1.Hash{}, err
	}
	if err := tmp.Chmod(0o644); err != nil {
		return v1.Hash{}, err
	}
	if err := tmp.Close(); err != nil {
		return v1.Hash{}, err
	}
	return top.Digest, os.Rename(tmp.Name(), path)
}
