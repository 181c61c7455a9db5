package sandboxruntime

import (
	"archive/tar"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// maxExtractBytes caps the file content one fs/write upload may unpack, so a small
// gzip bomb cannot fill the host's disk. A variable so tests can lower it.
var maxExtractBytes int64 = 8 << 30

// maxUploadEntries caps the entries of one fs/write upload, so a small stream of
// empty files cannot use up the host's inodes.
const maxUploadEntries = 1 << 20

// TarLimits caps what one tar stream may unpack. Zero fields take the fs/write
// defaults (UploadLimits).
type TarLimits struct {
	MaxEntries   int   // entries of any type
	MaxBytes     int64 // file content in total
	MaxFileBytes int64 // content of one file; 0 = MaxBytes
}

// UploadLimits are the limits of an fs/write upload: 1Mi entries, 8 GiB.
func UploadLimits() TarLimits {
	return TarLimits{MaxEntries: maxUploadEntries, MaxBytes: maxExtractBytes}
}

func (l TarLimits) normalized() TarLimits {
	d := UploadLimits()
	if l.MaxEntries <= 0 {
		l.MaxEntries = d.MaxEntries
	}
	if l.MaxBytes <= 0 {
		l.MaxBytes = d.MaxBytes
	}
	if l.MaxFileBytes <= 0 || l.MaxFileBytes > l.MaxBytes {
		l.MaxFileBytes = l.MaxBytes
	}
	return l
}

// StreamBytes bounds the decompressed tar stream of an extraction within l:
// the content plus up to 8 KiB of headers (long names, PAX records) per entry.
// Reading is cut off there, so neither a gzip bomb nor a flood of header
// records can make extraction read without end.
func (l TarLimits) StreamBytes() int64 {
	l = l.normalized()
	return l.MaxBytes + int64(l.MaxEntries)*8<<10 + 1<<20
}

// ExtractTarGz unpacks an fs/write upload within UploadLimits; see
// ExtractTarGzLimited.
func (f *FS) ExtractTarGz(cwd string, r io.Reader) error {
	return f.ExtractTarGzLimited(cwd, r, UploadLimits())
}

// ExtractTarGzLimited unpacks a gzip-compressed tar stream (the body of fs/write, or
// a tarball source) into the session, relative to the sandbox directory cwd (the
// x-cwd header; "" means /vercel/sandbox), which is created if missing. Missing
// parent directories are created, existing files and symlinks are replaced (as tar
// does), entry modes are applied without setuid/setgid, and everything written
// belongs to the sandbox user. Entries are accepted as the JS SDK's tar-stream
// writes them: ustar with PAX or GNU long names, regular files, directories and
// symlinks.
//
// Refused with ErrInvalidInput, which stops the extraction (entries before the bad
// one stay written, as with tar):
//   - names that are absolute or contain a ".." component;
//   - symlinks with an absolute target or one that leaves the session root;
//   - writing through an existing symlink that is absolute or leaves the root
//     (uploads never follow such links, even though commands would see them
//     relative to the sandbox's "/");
//   - hard links, character and block devices, FIFOs, sparse files and unknown
//     entry types;
//   - a file where a directory exists, a corrupt gzip or tar stream;
//   - more entries, content, content in one file or decompressed bytes than lim
//     allows.
func (f *FS) ExtractTarGzLimited(cwd string, r io.Reader, lim TarLimits) error {
	lim = lim.normalized()
	zr, err := gzip.NewReader(r)
	if err != nil {
		return requestErrorf(err, "invalid gzip stream: %v", err)
	}
	defer zr.Close()

	root, err := os.OpenRoot(f.root)
	if err != nil {
		return err
	}
	defer root.Close()

	base := Workdir
	if cwd != "" {
		base = sandboxAbs(cwd, "")
	}
	if _, err := ensureSandboxDir(root, base, true); err != nil {
		return err
	}

	x := &tarExtraction{root: root, base: base, budget: lim.MaxBytes, lim: lim}
	stream := &cappedReader{r: zr, left: lim.StreamBytes()}
	tr := tar.NewReader(stream)
	var extractErr error
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if errors.Is(err, errStreamCap) {
			extractErr = requestErrorf(err, "tar stream exceeds %d decompressed bytes", lim.StreamBytes())
			break
		}
		if err != nil {
			extractErr = requestErrorf(err, "invalid tar stream: %v", err)
			break
		}
		if x.entries++; x.entries > lim.MaxEntries {
			extractErr = requestErrorf(nil, "tar stream has more than %d entries", lim.MaxEntries)
			break
		}
		if err := x.entry(hdr, tr); err != nil {
			extractErr = err
			break
		}
	}
	// Directory modes are applied last, deepest first, so that a read-only
	// directory entry does not stop the entries inside it from being written.
	for i := len(x.dirs) - 1; i >= 0; i-- {
		d := x.dirs[i]
		if err := root.Chmod(d.rel, d.mode); err != nil && extractErr == nil {
			extractErr = err
		}
		if !d.mtime.IsZero() {
			_ = root.Chtimes(d.rel, d.mtime, d.mtime)
		}
	}
	return extractErr
}

// tarExtraction is the state of one ExtractTarGz call.
type tarExtraction struct {
	root    *os.Root
	base    string // absolute sandbox directory entry names are relative to
	budget  int64  // content bytes still allowed
	lim     TarLimits
	entries int // entries seen so far
	dirs    []tarDirMeta
}

// errStreamCap ends a decompressed tar stream that grew past its limit.
var errStreamCap = errors.New("decompressed tar stream too large")

// cappedReader returns errStreamCap once more than left bytes were asked for.
type cappedReader struct {
	r    io.Reader
	left int64
}

func (c *cappedReader) Read(p []byte) (int, error) {
	if c.left <= 0 {
		return 0, errStreamCap
	}
	if int64(len(p)) > c.left {
		p = p[:c.left]
	}
	n, err := c.r.Read(p)
	c.left -= int64(n)
	return n, err
}

// tarDirMeta is a directory entry's mode and time, applied after all entries.
type tarDirMeta struct {
	rel   string
	mode  os.FileMode
	mtime time.Time
}

// entry extracts one tar entry.
func (x *tarExtraction) entry(hdr *tar.Header, body io.Reader) error {
	name := hdr.Name
	typ := hdr.Typeflag
	//lint:ignore SA1019 TypeRegA is deprecated, but old writers still emit it.
	if typ == tar.TypeRegA || typ == tar.TypeCont {
		typ = tar.TypeReg
	}
	if typ == tar.TypeReg && strings.HasSuffix(name, "/") {
		typ = tar.TypeDir // pre-POSIX tars mark directories with a trailing slash
	}
	switch typ {
	case tar.TypeXGlobalHeader:
		return nil
	case tar.TypeReg, tar.TypeDir, tar.TypeSymlink:
	case tar.TypeLink:
		return requestErrorf(nil, "tar entry %q: hard links are not supported", name)
	case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
		return requestErrorf(nil, "tar entry %q: devices and FIFOs are not allowed", name)
	case tar.TypeGNUSparse:
		return requestErrorf(nil, "tar entry %q: sparse files are not supported", name)
	default:
		return requestErrorf(nil, "tar entry %q: unsupported entry type %q", name, typ)
	}
	for k := range hdr.PAXRecords {
		if strings.HasPrefix(k, "GNU.sparse.") {
			return requestErrorf(nil, "tar entry %q: sparse files are not supported", name)
		}
	}

	if name == "" || strings.IndexByte(name, 0) >= 0 {
		return requestErrorf(nil, "tar entry %q: invalid name", name)
	}
	if path.IsAbs(name) {
		return requestErrorf(nil, "tar entry %q: absolute names are not allowed", name)
	}
	for _, c := range pathComponents(name) {
		if c == ".." {
			return requestErrorf(nil, "tar entry %q: name escapes the target directory", name)
		}
	}
	full := path.Join(x.base, name)
	if full == x.base {
		if typ == tar.TypeDir {
			return nil // "./": the target directory itself
		}
		return requestErrorf(nil, "tar entry %q: invalid name", name)
	}
	parent, err := ensureSandboxDir(x.root, path.Dir(full), true)
	if err != nil {
		return err
	}
	rel := path.Join(parent, path.Base(full))
	existing, err := x.root.Lstat(rel)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	exists := err == nil

	mode := os.FileMode(hdr.Mode & 0o777)
	if hdr.Mode&0o1000 != 0 {
		mode |= os.ModeSticky
	}

	switch typ {
	case tar.TypeDir:
		if exists && !existing.IsDir() {
			if err := x.root.Remove(rel); err != nil {
				return err
			}
			exists = false
		}
		if !exists {
			if err := x.root.Mkdir(rel, 0o700); err != nil {
				return err
			}
		}
		if err := chownToSandboxUser(x.root, rel); err != nil {
			return err
		}
		x.dirs = append(x.dirs, tarDirMeta{rel: rel, mode: mode, mtime: hdr.ModTime})
		return nil

	case tar.TypeSymlink:
		target := hdr.Linkname
		switch {
		case target == "" || strings.IndexByte(target, 0) >= 0:
			return requestErrorf(nil, "tar entry %q: invalid symlink target", name)
		case path.IsAbs(target):
			return requestErrorf(nil, "tar entry %q: absolute symlink target %q is not allowed", name, target)
		}
		if t := path.Join(parent, target); t == ".." || strings.HasPrefix(t, "../") {
			return requestErrorf(nil, "tar entry %q: symlink target %q escapes the sandbox root", name, target)
		}
		if exists {
			if existing.IsDir() {
				return requestErrorf(syscall.EISDIR, "tar entry %q: %s is a directory", name, full)
			}
			if err := x.root.Remove(rel); err != nil {
				return err
			}
		}
		if err := x.root.Symlink(target, rel); err != nil {
			return err
		}
		return chownToSandboxUser(x.root, rel)

	default: // regular file
		if exists {
			if existing.IsDir() {
				return requestErrorf(syscall.EISDIR, "tar entry %q: %s is a directory", name, full)
			}
			// Replace rather than write through: the old entry may be a symlink.
			if err := x.root.Remove(rel); err != nil {
				return err
			}
		}
		if hdr.Size > x.lim.MaxFileBytes {
			return requestErrorf(nil, "tar entry %q: file of %d bytes exceeds the limit of %d bytes per file", name, hdr.Size, x.lim.MaxFileBytes)
		}
		if hdr.Size > x.budget {
			return requestErrorf(nil, "tar entry %q: upload exceeds %d bytes", name, x.lim.MaxBytes)
		}
		out, err := x.root.OpenFile(rel, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return err
		}
		src := &tarBodyReader{r: body}
		n, err := io.Copy(out, src)
		x.budget -= n
		if err == nil {
			err = out.Chmod(mode)
		}
		if err == nil && chownAllowed() {
			u := sandboxUser()
			err = out.Chown(u.uid, u.gid)
		}
		if cerr := out.Close(); err == nil {
			err = cerr
		}
		if errors.Is(src.err, errStreamCap) {
			return requestErrorf(src.err, "tar stream exceeds %d decompressed bytes", x.lim.StreamBytes())
		}
		if src.err != nil {
			return requestErrorf(src.err, "invalid tar stream: entry %q: %v", name, src.err)
		}
		if err != nil {
			return fmt.Errorf("write %s: %w", full, err)
		}
		if !hdr.ModTime.IsZero() {
			_ = x.root.Chtimes(rel, hdr.ModTime, hdr.ModTime)
		}
		return nil
	}
}

// tarBodyReader remembers the error its reader returned, telling a corrupt upload
// (the client's fault) apart from a failing write (ours).
type tarBodyReader struct {
	r   io.Reader
	err error
}

func (r *tarBodyReader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	if err != nil && err != io.EOF {
		r.err = err
	}
	return n, err
}

// CopyDir copies the host directory hostDir into the session at the sandbox
// directory cwd ("" = /vercel/sandbox): directories, regular files and relative
// symlinks; absolute symlinks (which would point out of the sandbox) and special
// files are left out. The tree is packed as a gzip'd tar stream and fed to
// ExtractTarGz, so it obeys exactly the rules of an upload.
func (f *FS) CopyDir(hostDir, cwd string) error {
	pr, pw := io.Pipe()
	go func() {
		gz := gzip.NewWriter(pw)
		tw := tar.NewWriter(gz)
		err := filepath.WalkDir(hostDir, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(hostDir, p)
			if rel == "." {
				return nil
			}
			info, err := d.Info()
			if err != nil {
				return err
			}
			var link string
			if info.Mode()&fs.ModeSymlink != 0 {
				if link, err = os.Readlink(p); err != nil {
					return err
				}
				if filepath.IsAbs(link) {
					return nil // absolute symlinks would escape the sandbox
				}
			} else if !info.Mode().IsRegular() && !info.IsDir() {
				return nil
			}
			hdr, err := tar.FileInfoHeader(info, link)
			if err != nil {
				return err
			}
			hdr.Name = filepath.ToSlash(rel)
			if info.IsDir() {
				hdr.Name += "/"
			}
			hdr.Uname, hdr.Gname, hdr.Uid, hdr.Gid = "", "", 0, 0
			if err := tw.WriteHeader(hdr); err != nil {
				return err
			}
			if info.Mode().IsRegular() {
				in, err := os.Open(p)
				if err != nil {
					return err
				}
				_, err = io.Copy(tw, in)
				in.Close()
				return err
			}
			return nil
		})
		if err == nil {
			err = tw.Close()
		}
		if err == nil {
			err = gz.Close()
		}
		pw.CloseWithError(err)
	}()
	err := f.ExtractTarGz(cwd, pr)
	_ = pr.CloseWithError(io.ErrClosedPipe)
	return err
}
