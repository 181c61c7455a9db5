package sandboxruntime

import (
	"bytes"
	"os"
	"strconv"
	"time"
)

// userHZ is the unit of the times in /proc/<pid>/stat: the kernel reports
// them in USER_HZ ticks, fixed at 100 per second on Linux whatever the
// kernel's own tick rate (proc(5)).
const userHZ = 100

// liveCPUTime reads the CPU time of the running process pid and of the
// children it has waited for from /proc/<pid>/stat (utime, stime, cutime,
// cstime: fields 14 to 17). It is zero when the process is gone or the file
// cannot be parsed; the exact figure comes with the reap.
func liveCPUTime(pid int) time.Duration {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	// The command name (field 2) is in parentheses and may hold spaces or
	// parentheses itself: the fields that follow start after the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0
	}
	f := bytes.Fields(b[i+1:])
	// f[0] is field 3 (state), so field n is f[n-3].
	if len(f) < 15 {
		return 0
	}
	var ticks int64
	for _, s := range f[11:15] {
		n, err := strconv.ParseInt(string(s), 10, 64)
		if err != nil || n < 0 {
			return 0
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / userHZ
}
