package loadgen

import (
	"syscall"
	"time"
)

// ProcessCPU is the CPU time this process has used (user and system), 0
// when it cannot be read: what a load cost, read before and after it,
// which a machine's load moves far less than the rate.
func ProcessCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
