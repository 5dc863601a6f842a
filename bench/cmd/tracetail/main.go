// Command tracetail reads a runtime trace of the service (loadgen -trace,
// or the service's /debug/pprof/trace) and says what the slowest calls
// were made of. The server marks each extender call as a trace region
// named for its verb; for every such region tracetail adds up, on the
// goroutine that served it, the time it ran, waited for a processor
// (runnable), was blocked, assisted the collector and swept, and how much
// of the call overlapped the collector's mark phase. It prints these
// means for all calls, for the calls at or above the 99th percentile, and
// for those between the 45th and 55th, so that the tail can be read
// against the median; the slowest are also split into those beside a
// mark phase and the others. For each group it also says who held a
// processor while the calls waited for one, why and where the calls were
// blocked (a lock such as the store's, a write of the answer), and where
// they assisted the collector (the code whose allocation made them).
// -slowest N lists the N slowest calls one by one: a mean can hide the
// one call past a latency bound.
//
//	loadgen -trace /tmp/t- ... && tracetail /tmp/t-filter-names-500.trace
//	tracetail -verb filter -slowest 10 service.trace
package main

import (
	"bufio"
	"cmp"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"golang.org/x/exp/trace"
)

// call is one region: its length and what its goroutine did during it.
type call struct {
	verb       string
	start, end trace.Time
	running    time.Duration
	runnable   time.Duration
	blocked    time.Duration // waiting or in a syscall
	assist     time.Duration // GC mark assist
	sweep      time.Duration // GC incremental sweep on the call's goroutine
	markLap    time.Duration // overlap with a GC mark phase
	stw        time.Duration // overlap with a stop-the-world pause
	// othersRan: while the call's goroutine was runnable, how long each
	// goroutine that held a processor ran, by its root function.
	othersRan map[string]time.Duration
	// blockedBy: the blocked time by why and where the goroutine blocked
	// (the transition's reason and the first frame outside the runtime
	// and the sync packages).
	blockedBy map[string]time.Duration
	// assistedIn: the mark-assist time by the frame that allocated (the
	// innermost outside the runtime) when the assist began.
	assistedIn map[string]time.Duration
}

func (c *call) dur() time.Duration { return time.Duration(c.end - c.start) }

// gState is a goroutine's state since a time, and its open call.
type gState struct {
	state trace.GoState
	since trace.Time
	open  *call
	// blockedAt: why and where the goroutine last blocked.
	blockedAt string
	// assistSince, sweepSince: the open assist or sweep range, 0 if none.
	assistSince, sweepSince trace.Time
	// assistSite: where the open assist began (codeSite).
	assistSite string
	// root is the goroutine's root function, from the first stack of it
	// the trace holds ("?" until then).
	root string
}

type interval struct{ from, to trace.Time }

func main() {
	verb := flag.String("verb", "", "only regions of this verb (default: every region)")
	slowest := flag.Int("slowest", 0, "also list this many of the slowest calls, one row each")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: tracetail [-verb filter] file.trace")
		os.Exit(2)
	}
	calls, err := read(flag.Arg(0), *verb)
	if err != nil {
		fmt.Fprintln(os.Stderr, "tracetail:", err)
		os.Exit(1)
	}
	report(os.Stdout, calls)
	listSlowest(os.Stdout, calls, *slowest)
}

// read walks the trace once, keeping each goroutine's state, and closes a
// call at its region's end. Mark phases and pauses are global; their
// overlap with calls is computed after the walk.
func read(path, verb string) ([]*call, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	r, err := trace.NewReader(bufio.NewReader(f))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	t := &tally{verb: verb, gs: map[trace.GoID]*gState{}, running: map[trace.GoID]*gState{}, inCall: map[trace.GoID]*gState{}}
	for {
		ev, err := r.ReadEvent()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", path, err)
		}
		switch ev.Kind() {
		case trace.EventStateTransition:
			t.transition(ev)
		case trace.EventRegionBegin, trace.EventRegionEnd:
			t.region(ev)
		case trace.EventRangeBegin, trace.EventRangeEnd:
			t.rangeEvent(ev)
		}
	}
	for _, c := range t.calls {
		c.markLap = overlap(c, t.marks)
		c.stw = overlap(c, t.stws)
	}
	return t.calls, nil
}

// tally is what read keeps while it goes through a trace's events: each
// goroutine's state, the calls (regions of verb) closed so far, and the
// collector's mark phases and stop-the-world pauses.
type tally struct {
	verb    string
	gs      map[trace.GoID]*gState
	running map[trace.GoID]*gState
	// inCall are the goroutines with a call open: each change of state
	// visits them, where visiting every goroutine the trace had named so
	// far made a 30-s trace of the service take minutes.
	inCall              map[trace.GoID]*gState
	lastRunChange       trace.Time
	calls               []*call
	marks, stws         []interval
	markSince, stwSince trace.Time
}

// g is goroutine id's state, made on its first event.
func (t *tally) g(id trace.GoID) *gState {
	s := t.gs[id]
	if s == nil {
		s = &gState{state: trace.GoUndetermined, root: "?"}
		t.gs[id] = s
	}
	return s
}

// addOthersRan gives each call whose goroutine is runnable the time
// since the last change of who runs, for each goroutine running.
func (t *tally) addOthersRan(now trace.Time) {
	d := time.Duration(now - t.lastRunChange)
	t.lastRunChange = now
	if d <= 0 || len(t.running) == 0 {
		return
	}
	for _, s := range t.inCall {
		if s.state != trace.GoRunnable {
			continue
		}
		for _, o := range t.running {
			addTo(&s.open.othersRan, o.root, d)
		}
	}
}

// transition accounts a goroutine's change of state.
func (t *tally) transition(ev trace.Event) {
	st := ev.StateTransition()
	if st.Resource.Kind != trace.ResourceGoroutine {
		return
	}
	now := ev.Time()
	id := st.Resource.Goroutine()
	_, to := st.Goroutine()
	t.addOthersRan(now)
	s := t.g(id)
	if s.root == "?" {
		s.root = rootOf(st.Stack)
	}
	s.account(now)
	s.state = to
	if to == trace.GoWaiting || to == trace.GoSyscall {
		s.blockedAt = blockSite(st.Reason, st.Stack)
	}
	if to == trace.GoRunning {
		t.running[id] = s
	} else {
		delete(t.running, id)
	}
}

// region opens a call at a verb's region and closes it at the region's end.
func (t *tally) region(ev trace.Event) {
	now, rg, s := ev.Time(), ev.Region(), t.g(ev.Goroutine())
	if ev.Kind() == trace.EventRegionBegin {
		if t.verb != "" && rg.Type != t.verb || !isVerb(rg.Type) {
			return
		}
		s.account(now)
		s.open = &call{verb: rg.Type, start: now}
		t.inCall[ev.Goroutine()] = s
		return
	}
	if s.open == nil || s.open.verb != rg.Type {
		return
	}
	s.account(now)
	s.open.end = now
	t.calls = append(t.calls, s.open)
	s.open = nil
	delete(t.inCall, ev.Goroutine())
}

// rangeEvent follows the collector's ranges: mark phases and pauses for
// the whole process, assists and sweeps on a call's goroutine.
func (t *tally) rangeEvent(ev trace.Event) {
	now, rg := ev.Time(), ev.Range()
	begin := ev.Kind() == trace.EventRangeBegin
	switch {
	case rg.Name == "GC concurrent mark phase":
		t.marks, t.markSince = appendInterval(t.marks, t.markSince, begin, now)
	case strings.HasPrefix(rg.Name, "stop-the-world"):
		t.stws, t.stwSince = appendInterval(t.stws, t.stwSince, begin, now)
	case rg.Name == "GC mark assist":
		s := t.g(rg.Scope.Goroutine())
		if begin {
			s.assistSite = codeSite(ev.Stack())
		}
		if d := s.goRange(&s.assistSince, begin, now, func(c *call) *time.Duration { return &c.assist }); d > 0 {
			addTo(&s.open.assistedIn, s.assistSite, d)
		}
	case rg.Name == "GC incremental sweep":
		s := t.g(ev.Goroutine())
		s.goRange(&s.sweepSince, begin, now, func(c *call) *time.Duration { return &c.sweep })
	}
}

// appendInterval notes a range's start at begin and appends the interval
// at its end (an end without a start in the trace is dropped).
func appendInterval(xs []interval, since trace.Time, begin bool, now trace.Time) ([]interval, trace.Time) {
	if begin {
		return xs, now
	}
	if since != 0 {
		xs = append(xs, interval{since, now})
	}
	return xs, 0
}

// blockSite names a block by its reason and the innermost frame outside
// the runtime, sync and poll packages: the code that waited.
func blockSite(reason string, stack trace.Stack) string {
	if reason == "" {
		reason = "syscall"
	}
	return reason + " in " + codeSite(stack)
}

// codeSite is the innermost frame of stack outside the runtime, sync and
// poll packages, "?" if none.
func codeSite(stack trace.Stack) string {
	for f := range stack.Frames() {
		if !strings.HasPrefix(f.Func, "runtime.") && !strings.HasPrefix(f.Func, "sync.") &&
			!strings.HasPrefix(f.Func, "internal/") && !strings.HasPrefix(f.Func, "syscall.") {
			return f.Func
		}
	}
	return "?"
}

// rootOf is the outermost function of stack, "?" for an empty one.
func rootOf(stack trace.Stack) string {
	root := "?"
	for f := range stack.Frames() {
		root = f.Func
	}
	return root
}

func isVerb(s string) bool {
	switch s {
	case "filter", "prioritize", "preempt", "bind":
		return true
	}
	return false
}

// goRange opens (begin) or closes a range on the goroutine (a mark
// assist, a sweep) whose start since holds; closing adds its part within
// the open call to the call's field that field gives, and returns that
// part (0 when no call is open).
func (s *gState) goRange(since *trace.Time, begin bool, now trace.Time, field func(*call) *time.Duration) time.Duration {
	if begin {
		*since = now
		return 0
	}
	if *since == 0 {
		return 0
	}
	var d time.Duration
	if s.open != nil {
		d = time.Duration(now - max(*since, s.open.start))
		*field(s.open) += d
	}
	*since = 0
	return d
}

// addTo adds d to (*m)[k], making the map on first use.
func addTo(m *map[string]time.Duration, k string, d time.Duration) {
	if *m == nil {
		*m = map[string]time.Duration{}
	}
	(*m)[k] += d
}

// account adds the time since the last transition to the open call's
// share of the goroutine's state.
func (s *gState) account(now trace.Time) {
	if s.open != nil {
		d := time.Duration(now - max(s.since, s.open.start))
		switch s.state {
		case trace.GoRunning:
			s.open.running += d
		case trace.GoRunnable:
			s.open.runnable += d
		case trace.GoWaiting, trace.GoSyscall:
			s.open.blocked += d
			addTo(&s.open.blockedBy, s.blockedAt, d)
		}
	}
	s.since = now
}

func overlap(c *call, ivs []interval) time.Duration {
	var d time.Duration
	for _, iv := range ivs {
		from, to := max(iv.from, c.start), min(iv.to, c.end)
		if to > from {
			d += time.Duration(to - from)
		}
	}
	return d
}

// report prints the means of groups of calls: all, the median's, the
// slowest percent and that percent split by whether a call overlapped the
// collector's mark phase.
func report(w io.Writer, calls []*call) {
	if len(calls) == 0 {
		fmt.Fprintln(w, "no extender calls in the trace (is it the service's, with regions?)")
		return
	}
	slices.SortFunc(calls, func(a, b *call) int { return int(a.dur() - b.dur()) })
	n := len(calls)
	p99 := calls[min(n-1, n*99/100)].dur()
	fmt.Fprintf(w, "%d calls; p50 %.3f ms, p99 %.3f ms, max %.3f ms\n\n", n, ms(calls[n/2].dur()), ms(p99), ms(calls[n-1].dur()))
	fmt.Fprintln(w, "| calls | n | mean ms | running | runnable | blocked | assist | sweep | overlapping a mark phase (share of calls) | mark overlap | stop-the-world |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	slow := calls[min(n-1, n*99/100):]
	// The slow calls split by the collector: those beside a mark phase
	// wait for it, the others show what the machine does to a call.
	groups := []struct {
		name string
		cs   []*call
	}{
		{"all", calls},
		{"p45 to p55", calls[n*45/100 : max(n*55/100, n*45/100+1)]},
		{"p99 and above", slow},
		{"p99 and above, beside a mark phase", slices.DeleteFunc(slices.Clone(slow), func(c *call) bool { return c.markLap == 0 })},
		{"p99 and above, no mark phase", slices.DeleteFunc(slices.Clone(slow), func(c *call) bool { return c.markLap > 0 })},
	}
	for _, gr := range groups {
		if len(gr.cs) > 0 {
			row(w, gr.name, gr.cs)
		}
	}
	for _, b := range breakdowns {
		fmt.Fprintf(w, "\nWhile the call %s, mean ms per call %s:\n", b.while, b.by)
		for _, gr := range groups {
			if len(gr.cs) > 0 {
				fmt.Fprintf(w, "- %s: %s\n", gr.name, meanBy(gr.cs, b.of))
			}
		}
	}
}

// breakdowns are the maps of a call's time by who or where, as the report
// prints them.
var breakdowns = []struct {
	while, by string
	of        func(*call) map[string]time.Duration
}{
	{"waited for a processor", "that each goroutine (by root function) held one", func(c *call) map[string]time.Duration { return c.othersRan }},
	{"was blocked", "by why and where", func(c *call) map[string]time.Duration { return c.blockedBy }},
	{"assisted the collector", "by the code that allocated", func(c *call) map[string]time.Duration { return c.assistedIn }},
}

// listSlowest prints the n slowest calls (calls sorted by report), the
// slowest first, each with what its goroutine did and who held a
// processor while it waited for one: a p99's mean can hide the one call
// past a latency bound.
func listSlowest(w io.Writer, calls []*call, n int) {
	if n <= 0 || len(calls) == 0 {
		return
	}
	first := slices.MinFunc(calls, func(a, b *call) int { return cmp.Compare(a.start, b.start) }).start
	fmt.Fprintf(w, "\nThe %d slowest calls (ms; at: seconds from the trace's first call's start):\n\n", min(n, len(calls)))
	fmt.Fprintln(w, "| verb | at s | ms | running | runnable | blocked | assist | sweep | mark overlap | stop-the-world | held a processor while it waited | blocked by | assisted in |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|---|")
	for i := len(calls) - 1; i >= max(0, len(calls)-n); i-- {
		c := calls[i]
		fmt.Fprintf(w, "| %s | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f |", c.verb, time.Duration(c.start-first).Seconds(), ms(c.dur()),
			ms(c.running), ms(c.runnable), ms(c.blocked), ms(c.assist), ms(c.sweep), ms(c.markLap), ms(c.stw))
		for _, b := range breakdowns {
			fmt.Fprintf(w, " %s |", meanBy([]*call{c}, b.of))
		}
		fmt.Fprintln(w)
	}
}

// meanBy is the mean time per call under each key of the map that of
// gives for a call, the largest first.
func meanBy(cs []*call, of func(*call) map[string]time.Duration) string {
	sum := map[string]time.Duration{}
	for _, c := range cs {
		for k, d := range of(c) {
			sum[k] += d
		}
	}
	keys := make([]string, 0, len(sum))
	for k := range sum {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b string) int { return int(sum[b] - sum[a]) })
	var parts []string
	for i, k := range keys {
		if i == 6 {
			break
		}
		parts = append(parts, fmt.Sprintf("%s %.3f", k, ms(sum[k]/time.Duration(len(cs)))))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

func row(w io.Writer, name string, cs []*call) {
	var sum call
	var total time.Duration
	marked := 0
	for _, c := range cs {
		total += c.dur()
		sum.running += c.running
		sum.runnable += c.runnable
		sum.blocked += c.blocked
		sum.assist += c.assist
		sum.sweep += c.sweep
		sum.markLap += c.markLap
		sum.stw += c.stw
		if c.markLap > 0 {
			marked++
		}
	}
	k := time.Duration(len(cs))
	fmt.Fprintf(w, "| %s | %d | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f | %.0f%% | %.3f | %.3f |\n", name, len(cs),
		ms(total/k), ms(sum.running/k), ms(sum.runnable/k), ms(sum.blocked/k), ms(sum.assist/k), ms(sum.sweep/k),
		100*float64(marked)/float64(len(cs)), ms(sum.markLap/k), ms(sum.stw/k))
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }
