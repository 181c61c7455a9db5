package chaos

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// serveEmulator serves the emulator on loopback behind a log of every
// request (WorkDir/logs/vercel-requests.log: time, method, path, status or
// "dropped", duration), so a post-mortem can count the calls made for one
// object. The server stops with the harness's stack.
func (h *harness) serveEmulator() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	f, err := os.Create(filepath.Join(h.cfg.WorkDir, "logs", "vercel-requests.log"))
	if err != nil {
		_ = ln.Close()
		return "", err
	}
	rl := &requestLog{w: bufio.NewWriterSize(f, 64<<10), next: h.stack.Emulator.Handler()}
	srv := &http.Server{Handler: rl, ReadHeaderTimeout: 30 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	h.stopEmulator = func() {
		_ = srv.Close()
		rl.mu.Lock()
		_ = rl.w.Flush()
		_ = f.Close()
		rl.mu.Unlock()
	}
	return "http://" + ln.Addr().String(), nil
}

type requestLog struct {
	mu   sync.Mutex
	w    *bufio.Writer
	next http.Handler
}

func (l *requestLog) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	sw := &statusWriter{ResponseWriter: w}
	status := "dropped"
	defer func() {
		if sw.status != 0 {
			status = fmt.Sprint(sw.status)
		}
		l.mu.Lock()
		fmt.Fprintf(l.w, "%s %s %s %s %s\n", start.UTC().Format("15:04:05.000"), r.Method, r.URL.Path, status, time.Since(start).Round(time.Millisecond))
		l.mu.Unlock()
	}()
	l.next.ServeHTTP(sw, r)
}

// statusWriter records the status; Unwrap lets http.ResponseController
// reach the connection (the emulator hijacks it to drop a response).
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (s *statusWriter) WriteHeader(code int) {
	if s.status == 0 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }
