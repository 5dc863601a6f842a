package perf

import (
	"bufio"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// StealTicks is the machine's steal time so far, in USER_HZ ticks (the
// eighth value of /proc/stat's cpu line: time a virtual CPU waited while
// the hypervisor ran another guest); ok is false where it cannot be read.
func StealTicks() (ticks uint64, ok bool) {
	f, err := os.Open("/proc/stat")
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	if !sc.Scan() {
		return 0, false
	}
	fields := strings.Fields(sc.Text())
	if len(fields) < 9 || fields[0] != "cpu" {
		return 0, false
	}
	n, err := strconv.ParseUint(fields[8], 10, 64)
	return n, err == nil
}

// StealPercent is ticks of steal over elapsed, as a share of every CPU's
// time (USER_HZ is 100 on Linux).
func StealPercent(ticks uint64, elapsed time.Duration) float64 {
	total := elapsed.Seconds() * 100 * float64(runtime.NumCPU())
	if total <= 0 {
		return 0
	}
	return float64(ticks) / total * 100
}
