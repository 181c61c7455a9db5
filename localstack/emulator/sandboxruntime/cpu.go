package sandboxruntime

import (
	"os"
	"syscall"
	"time"
)

// CPUTime is the CPU time, user plus system, the command has used: what
// Vercel bills as active CPU. A command that sleeps or waits for I/O uses
// none. For a command that exited it is what the kernel reported when it was
// reaped: the main process and the descendants it waited for (a shell's
// children), not background processes killed with its group. For a running
// command it is the same, read from /proc so far (Linux; zero elsewhere). In
// mode none nothing runs and it is zero.
func (p *Process) CPUTime() time.Duration {
	p.mu.Lock()
	cpu, done, pid := p.cpu, p.exited || p.reaped, p.pid
	p.mu.Unlock()
	if done || pid <= 0 {
		return cpu
	}
	return liveCPUTime(pid)
}

// reapedCPUTime is the CPU time in a reaped process's resource usage.
func reapedCPUTime(state *os.ProcessState) time.Duration {
	if state == nil {
		return 0
	}
	ru, ok := state.SysUsage().(*syscall.Rusage)
	if !ok || ru == nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
