// Command schedwait reads the kernel's scheduling record of a run
// (`perf sched timehist -w` text) and says how long each process waited
// for a CPU after it was woken or preempted, and, for the waits of one
// process over a threshold, what each CPU ran meanwhile: its own CPU
// (whose work it queued behind) and the others (idle, or whom). A tail
// that a process's own profile cannot explain (a call that runs 1.8 ms
// where the median runs 0.5, with no collection beside it) shows here as
// the client or the server queued on one CPU while another sat idle.
// With -list it lists those waits one by one, with how long the CPU the
// process waited for and the others sat idle meanwhile: a wait beside
// CPUs that are all idle is, on a VM, a vCPU the host did not run.
//
//	perf sched record -o /tmp/s.data -- sleep 4   # during a loadgen run
//	perf sched timehist -w -i /tmp/s.data > /tmp/s.txt
//	schedwait -who loadgen -over 300us /tmp/s.txt
//	schedwait -pids -who loadgen/1234 -over 5ms -list /tmp/s.txt
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"
)

// switchOut is one line of timehist: task ran on cpu until at, for run,
// after waiting delay for a CPU (the scheduling delay).
type switchOut struct {
	at    float64 // seconds
	cpu   int
	comm  string // the process's command name, "<idle>" for none
	delay time.Duration
	run   time.Duration
}

func (s switchOut) start() float64 { return s.at - s.run.Seconds() }

func main() {
	who := flag.String("who", "", "the process whose waits are broken down (its command name, or name/pid with -pids)")
	pids := flag.Bool("pids", false, "tell processes apart by pid (name/pid): a server started from the client's own binary")
	over := flag.Duration("over", 300*time.Microsecond, "the waits broken down: those at least this long")
	list := flag.Bool("list", false, "with -who, also list each such wait: when, on which CPU, and how long its CPU and the others sat idle meanwhile")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: schedwait [-pids] [-who process [-over 300us] [-list]] timehist.txt")
		os.Exit(2)
	}
	f, err := os.Open(flag.Arg(0))
	if err != nil {
		fmt.Fprintln(os.Stderr, "schedwait:", err)
		os.Exit(1)
	}
	defer f.Close()
	outs, err := parse(f, *pids)
	if err != nil {
		fmt.Fprintln(os.Stderr, "schedwait:", err)
		os.Exit(1)
	}
	if len(outs) == 0 {
		fmt.Fprintln(os.Stderr, "schedwait: no switch-out lines: is this `perf sched timehist` text?")
		os.Exit(1)
	}
	summarize(os.Stdout, outs)
	if *who != "" {
		fmt.Fprintln(os.Stdout)
		breakDown(os.Stdout, outs, *who, *over)
		if *list {
			listWaits(os.Stdout, outs, *who, *over)
		}
	}
}

// parse reads timehist's switch-out lines ("time [cpu] task wait delay
// run"); wakeup lines (-w) and headers are skipped.
func parse(r io.Reader, pids bool) ([]switchOut, error) {
	var outs []switchOut
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		f := strings.Fields(sc.Text())
		if len(f) < 6 || !strings.HasPrefix(f[1], "[") || strings.Contains(sc.Text(), "awakened:") {
			continue
		}
		at, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			continue // a header
		}
		cpu, err := strconv.Atoi(strings.Trim(f[1], "[]"))
		if err != nil {
			return nil, fmt.Errorf("line %d: cpu %q: %w", n, f[1], err)
		}
		var ms [3]float64
		for i, s := range f[len(f)-3:] {
			if ms[i], err = strconv.ParseFloat(s, 64); err != nil {
				return nil, fmt.Errorf("line %d: %q is not milliseconds: %w", n, s, err)
			}
		}
		outs = append(outs, switchOut{at: at, cpu: cpu, comm: processOf(strings.Join(f[2:len(f)-3], " "), pids),
			delay: millis(ms[1]), run: millis(ms[2])})
	}
	return outs, sc.Err()
}

// processOf is a task's process: its command name ("svc[1887/1884]" ->
// "svc"), with its pid after a slash if pids ("svc/1884"; a thread that
// is its process's first, "svc[1884]", is "svc/1884" too).
func processOf(task string, pids bool) string {
	i := strings.LastIndexByte(task, '[')
	if i <= 0 || !strings.HasSuffix(task, "]") {
		return task
	}
	if !pids {
		return task[:i]
	}
	ids := task[i+1 : len(task)-1]
	return task[:i] + "/" + ids[strings.LastIndexByte(ids, '/')+1:]
}

func millis(ms float64) time.Duration { return time.Duration(ms * float64(time.Millisecond)) }

// summarize prints, per process, its CPU time and its waits for a CPU.
func summarize(w io.Writer, outs []switchOut) {
	type totals struct {
		run, delay               time.Duration
		switches, over100, over1 int
		over300                  int
	}
	by := map[string]*totals{}
	var from, to float64
	for i, s := range outs {
		if i == 0 || s.start() < from {
			from = s.start()
		}
		to = max(to, s.at)
		t := by[s.comm]
		if t == nil {
			t = &totals{}
			by[s.comm] = t
		}
		t.run += s.run
		t.delay += s.delay
		t.switches++
		t.over100 += b2i(s.delay >= 100*time.Microsecond)
		t.over300 += b2i(s.delay >= 300*time.Microsecond)
		t.over1 += b2i(s.delay >= time.Millisecond)
	}
	names := make([]string, 0, len(by))
	for n := range by {
		if n != "<idle>" {
			names = append(names, n)
		}
	}
	sort.Slice(names, func(i, j int) bool { return by[names[i]].run > by[names[j]].run })
	fmt.Fprintf(w, "%.2f s recorded\n", to-from)
	fmt.Fprintln(w, "| process | CPU ms | runs | waited for a CPU, ms | waits >= 100 µs | >= 300 µs | >= 1 ms |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|")
	for _, n := range names {
		t := by[n]
		if t.run < time.Millisecond && t.delay < time.Millisecond {
			continue
		}
		fmt.Fprintf(w, "| %s | %.1f | %d | %.1f | %d | %d | %d |\n", n, ms(t.run), t.switches, ms(t.delay), t.over100, t.over300, t.over1)
	}
}

// breakDown prints, over the waits of who at least over long, what its
// own CPU ran and what the other CPUs ran (or that they were idle).
func breakDown(w io.Writer, outs []switchOut, who string, over time.Duration) {
	byCPU := switchesByCPU(outs)
	same, other := map[string]float64{}, map[string]float64{}
	var waits int
	var waited float64
	for _, s := range outs {
		if s.comm != who || s.delay < over {
			continue
		}
		waits++
		to := s.start()
		from := to - s.delay.Seconds()
		waited += to - from
		for cpu, segs := range byCPU {
			into := other
			if cpu == s.cpu {
				into = same
			}
			occupy(into, segs, from, to)
		}
	}
	if waits == 0 {
		fmt.Fprintf(w, "%s: no wait of %v or more\n", who, over)
		return
	}
	fmt.Fprintf(w, "%s: %d waits of %v or more, %.1f ms in all; meanwhile (ms):\n", who, waits, over, waited*1e3)
	fmt.Fprintln(w, "| ran | on the CPU it waited for | on the other CPUs |")
	fmt.Fprintln(w, "|---|---:|---:|")
	for _, n := range ranked(same, other) {
		fmt.Fprintf(w, "| %s | %.1f | %.1f |\n", n, same[n]*1e3, other[n]*1e3)
	}
}

// listWaits prints each wait of who at least over long, with how long the
// CPU it waited for and the least idle of the others sat idle meanwhile.
// A thread that waits while every CPU is idle waits for no other thread:
// on a VM, for a vCPU the host does not run.
func listWaits(w io.Writer, outs []switchOut, who string, over time.Duration) {
	byCPU := switchesByCPU(outs)
	fmt.Fprintf(w, "\n%s's waits of %v or more, one by one (ms):\n", who, over)
	fmt.Fprintln(w, "| woken at, s | CPU | waited | its CPU idle | the other CPUs idle, at least |")
	fmt.Fprintln(w, "|---:|---:|---:|---:|---:|")
	for _, s := range outs {
		if s.comm != who || s.delay < over {
			continue
		}
		to := s.start()
		from := to - s.delay.Seconds()
		own, others := 0.0, -1.0
		for cpu, segs := range byCPU {
			ran := map[string]float64{}
			occupy(ran, segs, from, to)
			if cpu == s.cpu {
				own = ran["<idle>"]
			} else if others < 0 || ran["<idle>"] < others {
				others = ran["<idle>"]
			}
		}
		fmt.Fprintf(w, "| %.6f | %d | %.3f | %.3f | %.3f |\n", from, s.cpu, ms(s.delay), own*1e3, max(others, 0)*1e3)
	}
}

// switchesByCPU is each CPU's switch-outs, by time.
func switchesByCPU(outs []switchOut) map[int][]switchOut {
	byCPU := map[int][]switchOut{}
	for _, s := range outs {
		byCPU[s.cpu] = append(byCPU[s.cpu], s)
	}
	for _, segs := range byCPU {
		sort.Slice(segs, func(i, j int) bool { return segs[i].at < segs[j].at })
	}
	return byCPU
}

// occupy adds to into the time each process ran on one CPU (its
// switch-outs segs, by time) within [from, to].
func occupy(into map[string]float64, segs []switchOut, from, to float64) {
	i := sort.Search(len(segs), func(i int) bool { return segs[i].at > from })
	for ; i < len(segs) && segs[i].start() < to; i++ {
		if d := min(segs[i].at, to) - max(segs[i].start(), from); d > 0 {
			into[segs[i].comm] += d
		}
	}
}

// ranked is the processes of a and b, by their time in both.
func ranked(a, b map[string]float64) []string {
	sum := map[string]float64{}
	for n, v := range a {
		sum[n] += v
	}
	for n, v := range b {
		sum[n] += v
	}
	names := make([]string, 0, len(sum))
	for n := range sum {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool { return sum[names[i]] > sum[names[j]] })
	return names
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
