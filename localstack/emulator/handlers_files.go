package emulator

import (
	"errors"
	"io/fs"
	"net/http"
	"path"
	"strconv"

	"github.com/getsentry/sandbox-controller/localstack/emulator/sandboxruntime"
)

// sessionFS finds the live session of a file operation and returns its
// filesystem, created on first use when create is set (nil otherwise when the
// session has none yet). The lock is not held when it returns: transfers take
// long.
func (e *Emulator) sessionFS(rc *reqCtx, create bool) (f *sandboxruntime.FS, err *apiError) {
	err = withLocked(e, rc, e.liveSessionLocked, func(s *sessionRec) (err *apiError) {
		if s.fs != nil || create {
			f, err = e.fsLocked(s)
		}
		return err
	})
	return f, err
}

func (e *Emulator) handleWriteFiles(rc *reqCtx) {
	cwd := rc.r.Header.Get("X-Cwd")
	if cwd != "" && !path.IsAbs(cwd) {
		rc.fail(badRequest("Invalid request: header `x-cwd` must be an absolute path."))
		return
	}
	f, err := e.sessionFS(rc, true)
	if err != nil {
		rc.fail(err)
		return
	}
	// Extraction streams the body and may take long: no lock held.
	xerr := f.ExtractTarGz(cwd, http.MaxBytesReader(rc.w, rc.r.Body, 8<<30))
	var mbe *http.MaxBytesError
	if errors.As(xerr, &mbe) {
		rc.fail(&apiError{status: 413, code: "payload_too_large", message: "Request body too large."})
		return
	}
	rc.answer(nil, runtimeError(xerr))
}

func (e *Emulator) handleReadFile(rc *reqCtx) {
	var b fileBody
	if !rc.decodeChecked(&b, false) {
		return
	}
	f, err := e.sessionFS(rc, false)
	if err != nil {
		rc.fail(err)
		return
	}
	if f == nil { // nothing was ever written to this session
		rc.fail(notFound("File %s not found.", *b.Path))
		return
	}
	data, rerr := f.ReadFileLimit(*b.Path, b.cwd(), e.opts.MaxReadBytes)
	if errors.Is(rerr, fs.ErrNotExist) {
		rc.fail(notFound("File %s not found.", *b.Path))
		return
	}
	if rerr != nil {
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
	if !rc.decodeChecked(&b, false) {
		return
	}
	// recursive defaults to true, as in the current OpenAPI document.
	recursive := b.Recursive == nil || *b.Recursive
	f, err := e.sessionFS(rc, true)
	if err != nil {
		rc.fail(err)
		return
	}
	rc.answer(nil, runtimeError(f.Mkdir(*b.Path, b.cwd(), recursive)))
}
