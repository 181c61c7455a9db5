package emulator

import (
	"errors"
	"io/fs"
	"net/http"
	"path"
	"strconv"

	"github.com/getsentry/sandbox-controller/internal/emulator/sandboxruntime"
)

// fileSessionLocked finds the live session of a file operation and its
// filesystem (created on first use when create is set; nil otherwise).
func (e *Emulator) fileSessionLocked(rc *reqCtx, create bool) (*sessionRec, *sandboxruntime.FS, *apiError) {
	s, err := e.liveSessionLocked(rc)
	if err != nil {
		return nil, nil, err
	}
	if s.fs == nil && !create {
		return s, nil, nil
	}
	f, err := e.fsLocked(s)
	return s, f, err
}

func (e *Emulator) handleWriteFiles(rc *reqCtx) {
	cwd := rc.r.Header.Get("X-Cwd")
	if cwd != "" && !path.IsAbs(cwd) {
		rc.fail(badRequest("Invalid request: header `x-cwd` must be an absolute path."))
		return
	}
	e.mu.Lock()
	_, f, err := e.fileSessionLocked(rc, true)
	e.unlock()
	if err != nil {
		rc.fail(err)
		return
	}
	// Extraction streams the body and may take long: no lock held.
	if xerr := f.ExtractTarGz(cwd, http.MaxBytesReader(rc.w, rc.r.Body, 8<<30)); xerr != nil {
		var mbe *http.MaxBytesError
		if errors.As(xerr, &mbe) {
			rc.fail(&apiError{status: 413, code: "payload_too_large", message: "Request body too large."})
			return
		}
		rc.fail(runtimeError(xerr))
		return
	}
	rc.json(http.StatusOK, struct{}{})
}

func (e *Emulator) handleReadFile(rc *reqCtx) {
	var b readBody
	if err := rc.decode(&b, false); err != nil {
		rc.fail(err)
		return
	}
	if b.Path == nil || *b.Path == "" {
		rc.fail(invalid("path", "is required: should have required property 'path'"))
		return
	}
	cwd := ""
	if b.Cwd != nil {
		cwd = *b.Cwd
	}
	e.mu.Lock()
	_, f, err := e.fileSessionLocked(rc, false)
	e.unlock()
	if err != nil {
		rc.fail(err)
		return
	}
	if f == nil { // nothing was ever written to this session
		rc.fail(notFound("File %s not found.", *b.Path))
		return
	}
	data, rerr := f.ReadFile(*b.Path, cwd)
	if rerr != nil {
		if errors.Is(rerr, fs.ErrNotExist) {
			rc.fail(notFound("File %s not found.", *b.Path))
			return
		}
		rc.fail(runtimeError(rerr))
		return
	}
	w := rc.w
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.Itoa(len(data)))
	w.Header().Set("Content-Disposition", "attachment; filename="+strconv.Quote(path.Base(*b.Path)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(data)
}

func (e *Emulator) handleMkdir(rc *reqCtx) {
	var b mkdirBody
	if err := rc.decode(&b, false); err != nil {
		rc.fail(err)
		return
	}
	if b.Path == nil || *b.Path == "" {
		rc.fail(invalid("path", "is required: should have required property 'path'"))
		return
	}
	cwd := ""
	if b.Cwd != nil {
		cwd = *b.Cwd
	}
	// recursive defaults to true, as in the current OpenAPI document.
	recursive := b.Recursive == nil || *b.Recursive
	e.mu.Lock()
	_, f, err := e.fileSessionLocked(rc, true)
	e.unlock()
	if err != nil {
		rc.fail(err)
		return
	}
	if merr := f.Mkdir(*b.Path, cwd, recursive); merr != nil {
		rc.fail(runtimeError(merr))
		return
	}
	rc.json(http.StatusOK, struct{}{})
}
