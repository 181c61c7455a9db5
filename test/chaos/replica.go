package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// Liveness probing as the kubelet does it with config/manager's probe:
// GET /healthz every 10s (timeout 1s) after 15s, three failures in a row
// restart the container.
const (
	livenessDelay     = 15 * time.Second
	livenessPeriod    = 10 * time.Second
	livenessTimeout   = time.Second
	livenessThreshold = 3
)

// replica is one manager Pod of the Deployment: the process is restarted
// whenever it ends (a SIGKILL from the harness, a liveness failure or an exit
// of its own), as the kubelet restarts a container.
type replica struct {
	name string
	h    *harness
	// args are appended to the harness's manager arguments (a later flag
	// wins), env replaces its environment when set: the leader-cut test
	// gives each replica its own Vercel and API-server addresses.
	args []string
	env  []string

	mu          sync.Mutex
	cur         *process
	incarnation int

	// Counted over the run.
	kills            int // SIGKILLs by the kill loop
	livenessRestarts int
	ownExits         []string // exits the harness did not cause
}

// process is one run of the manager binary.
type process struct {
	cmd       *exec.Cmd
	done      chan struct{}
	err       error
	logPath   string
	probeAddr string
	started   time.Time

	mu     sync.Mutex
	killed string // why the harness ended it ("" = it ended by itself)
}

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// signal sends sig unless the process has ended, recording why.
func (p *process) signal(sig syscall.Signal, why string) {
	p.mu.Lock()
	if p.killed == "" {
		p.killed = why
	}
	p.mu.Unlock()
	if p.cmd.Process != nil && !p.exited() {
		_ = p.cmd.Process.Signal(sig)
	}
}

func (p *process) killedBy() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.killed
}

// start runs a new incarnation of the manager.
func (r *replica) start() (*process, error) {
	r.mu.Lock()
	r.incarnation++
	n := r.incarnation
	r.mu.Unlock()
	h := r.h
	probe, err := freeAddr()
	if err != nil {
		return nil, err
	}
	logPath := filepath.Join(h.cfg.WorkDir, "logs", fmt.Sprintf("manager-%s-%03d.log", r.name, n))
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	args := append(append(append([]string(nil), h.managerArgs...), r.args...), "--health-probe-bind-address="+probe)
	cmd := exec.Command(h.cfg.ManagerBin, args...)
	cmd.Env = h.managerEnv
	if r.env != nil {
		cmd.Env = r.env
	}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		_ = logFile.Close()
		return nil, fmt.Errorf("start manager %s: %w", r.name, err)
	}
	p := &process{cmd: cmd, done: make(chan struct{}), logPath: logPath, probeAddr: probe, started: time.Now()}
	go func() {
		p.err = cmd.Wait()
		_ = logFile.Close()
		close(p.done)
	}()
	r.mu.Lock()
	r.cur = p
	r.mu.Unlock()
	return p, nil
}

// current is the running (or last) process.
func (r *replica) current() *process {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cur
}

// supervise restarts the process whenever it ends, until ctx ends, and
// probes its liveness meanwhile. restartDelay gives the pause before a
// restart.
func (r *replica) supervise(ctx context.Context, rng *rand.Rand, rngMu *sync.Mutex) {
	for {
		p := r.current()
		r.probeLiveness(ctx, p)
		select {
		case <-ctx.Done():
			return
		case <-p.done:
		}
		why := p.killedBy()
		if why == "" {
			msg := fmt.Sprintf("%s (incarnation log %s): %v; last output: %s", r.name, filepath.Base(p.logPath), p.err, tailOfFile(p.logPath, 600))
			r.mu.Lock()
			r.ownExits = append(r.ownExits, msg)
			r.mu.Unlock()
			r.h.logf("manager %s exited by itself: %v", r.name, p.err)
		}
		// The kubelet restarts at once the first times; a short random pause
		// lets the two replicas race for the Lease in either order.
		rngMu.Lock()
		delay := time.Duration(rng.Int64N(int64(2 * time.Second)))
		rngMu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay):
		}
		for {
			if _, err := r.start(); err == nil {
				break
			} else {
				r.h.logf("restart manager %s: %v", r.name, err)
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
		}
	}
}

// probeLiveness probes p's /healthz until p ends, and SIGKILLs it after
// livenessThreshold failures in a row. It returns when p has ended or ctx
// is done.
func (r *replica) probeLiveness(ctx context.Context, p *process) {
	hc := &http.Client{Timeout: livenessTimeout}
	failures := 0
	next := time.NewTimer(livenessDelay)
	defer next.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-p.done:
			return
		case <-next.C:
		}
		next.Reset(livenessPeriod)
		res, err := hc.Get("http://" + p.probeAddr + "/healthz")
		ok := err == nil && res.StatusCode < 400
		if res != nil {
			_ = res.Body.Close()
		}
		if ok {
			failures = 0
			continue
		}
		if failures++; failures >= livenessThreshold {
			r.mu.Lock()
			r.livenessRestarts++
			r.mu.Unlock()
			r.h.logf("manager %s failed its liveness probe %d times in a row: restarting it", r.name, failures)
			p.signal(syscall.SIGKILL, "liveness")
			return
		}
	}
}

// kill SIGKILLs the current process (the supervisor restarts it).
func (r *replica) kill() {
	p := r.current()
	if p == nil || p.exited() {
		return
	}
	r.mu.Lock()
	r.kills++
	r.mu.Unlock()
	p.signal(syscall.SIGKILL, "chaos")
}

// stop ends the current process with SIGTERM (SIGKILL after grace).
func (r *replica) stop(grace time.Duration) {
	p := r.current()
	if p == nil {
		return
	}
	p.signal(syscall.SIGTERM, "stop")
	select {
	case <-p.done:
	case <-time.After(grace):
		p.signal(syscall.SIGKILL, "stop")
		<-p.done
	}
}

// waitProbes waits until the process serves its probe port.
func (p *process) waitProbes(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if p.exited() {
			return fmt.Errorf("manager exited: %v; last output: %s", p.err, tailOfFile(p.logPath, 2000))
		}
		if c, err := net.DialTimeout("tcp", p.probeAddr, time.Second); err == nil {
			_ = c.Close()
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("manager did not serve its probes within %s; last output: %s", timeout, tailOfFile(p.logPath, 2000))
}

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// tailOfFile returns the last n bytes of a file.
func tailOfFile(path string, n int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return ""
	}
	off := max(fi.Size()-n, 0)
	buf := make([]byte, fi.Size()-off)
	_, _ = f.ReadAt(buf, off)
	return string(buf)
}
