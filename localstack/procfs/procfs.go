// Package procfs reads the few process facts that `make dev` and the
// benchmark need from Linux's /proc: which control-plane processes a process
// started (envtest and localstack/controlplane run them as children), and what is left of an earlier
// run. Where there is no /proc (macOS) it finds nothing: the callers use the
// facts for banners, clean-up and measurements only.
package procfs

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// Process is one entry of /proc.
type Process struct {
	PID  int
	Name string // the command name (/proc/<pid>/comm, whole when the kernel cut it)
	Args []string
}

// List returns the processes in /proc.
func List() []Process {
	entries, _ := os.ReadDir("/proc")
	var out []Process
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		comm, err := os.ReadFile(filepath.Join("/proc", e.Name(), "comm"))
		if err != nil {
			continue
		}
		cmdline, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		args := strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")
		name := strings.TrimSpace(string(comm))
		// The kernel cuts comm at 15 bytes ("kube-controller"); the
		// executable's file name is whole.
		if base := filepath.Base(args[0]); len(name) == 15 && strings.HasPrefix(base, name) {
			name = base
		}
		out = append(out, Process{PID: pid, Name: name, Args: args})
	}
	return out
}

// ParentPID reads the PPid line of /proc/<pid>/status; 0 when unknown.
func ParentPID(pid int) int {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "PPid:"); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(v))
			return n
		}
	}
	return 0
}

// ControlPlane returns the etcd, kube-apiserver and kube-controller-manager
// this process started, sorted by name.
func ControlPlane() []Process {
	var out []Process
	for _, p := range List() {
		if (p.Name == "kube-apiserver" || p.Name == "etcd" || p.Name == "kube-controller-manager") && ParentPID(p.PID) == os.Getpid() {
			out = append(out, p)
		}
	}
	slices.SortFunc(out, func(a, b Process) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Using returns the processes other than this one whose command line
// mentions dir or whose working directory is dir or below it: what a run on
// dir left behind.
func Using(dir string) []Process {
	var out []Process
	for _, p := range List() {
		if p.PID == os.Getpid() {
			continue
		}
		cwd, _ := os.Readlink(filepath.Join("/proc", strconv.Itoa(p.PID), "cwd"))
		if strings.Contains(strings.Join(p.Args, " "), dir) || cwd == dir || strings.HasPrefix(cwd, dir+"/") {
			out = append(out, p)
		}
	}
	return out
}
