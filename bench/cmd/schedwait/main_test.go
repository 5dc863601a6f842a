package main

import (
	"bytes"
	"os"
	"strings"
	"testing"
	"time"
)

func TestProcessOf(t *testing.T) {
	for _, tc := range []struct {
		task string
		pids bool
		want string
	}{
		{"svc[1887/1884]", false, "svc"},
		{"svc[1887/1884]", true, "svc/1884"},
		{"svc[1884]", true, "svc/1884"},
		{"kworker/u8:1-ev[35]", false, "kworker/u8:1-ev"},
		{"kworker/u8:1-ev[35]", true, "kworker/u8:1-ev/35"},
		{"<idle>", true, "<idle>"},
		{"memfd:sealed-91[32156]", false, "memfd:sealed-91"},
	} {
		if got := processOf(tc.task, tc.pids); got != tc.want {
			t.Errorf("processOf(%q, %v) = %q, want %q", tc.task, tc.pids, got, tc.want)
		}
	}
}

func TestParseRefusesWhatIsNotTimehist(t *testing.T) {
	for name, text := range map[string]string{
		"cpu":          "     100.000200 [00x0]  svc[10/9]   0.000  0.000  1.000\n",
		"milliseconds": "     100.000200 [0000]  svc[10/9]   0.000  0.000  1.0.0\n",
	} {
		if _, err := parse(strings.NewReader(text), false); err == nil {
			t.Errorf("%s: parsed %q without an error", name, text)
		}
	}
}

// A client woken while the server runs on its CPU waits for it there,
// while the other CPU is idle: the break-down says so.
func TestQueuedBehindTheServer(t *testing.T) {
	outs := parseFixture(t, "testdata/queued.txt")
	if len(outs) != 4 {
		t.Fatalf("parsed %d switch-outs, want 4 (headers and the wakeup skipped): %+v", len(outs), outs)
	}
	var sum, down bytes.Buffer
	summarize(&sum, outs)
	breakDown(&down, outs, "lg", 300*time.Microsecond)
	mustContain(t, "summary", sum.String(),
		"| svc | 1.0 | 1 | 0.0 | 0 | 0 | 0 |",
		"| lg | 1.2 | 1 | 0.8 | 1 | 1 | 0 |")
	if strings.Contains(sum.String(), "kworker") {
		t.Errorf("summary lists a process that neither ran nor waited a millisecond:\n%s", sum.String())
	}
	mustContain(t, "break-down", down.String(),
		"lg: 1 waits of 300µs or more, 0.8 ms in all",
		"| svc | 0.8 | 0.0 |",
		"| <idle> | 0.0 | 0.8 |")
	var none bytes.Buffer
	breakDown(&none, outs, "lg", 2*time.Millisecond)
	if !strings.Contains(none.String(), "no wait of 2ms or more") {
		t.Errorf("break-down over 2ms: %s", none.String())
	}
}

// A client woken onto a CPU that stays idle while the other CPU is idle
// too waits for no thread: the list says both CPUs were idle.
func TestWaitBesideIdleCPUs(t *testing.T) {
	outs := parseFixture(t, "testdata/idle.txt")
	var out bytes.Buffer
	listWaits(&out, outs, "lg", 5*time.Millisecond)
	// lg was woken at 200.0011 and ran at 200.0200: 18.9 ms, all of it
	// beside the idle task on CPU 1 (idle from 200.001) and on CPU 0
	// (idle from 200.001 to 200.021).
	mustContain(t, "list", out.String(),
		"lg's waits of 5ms or more, one by one",
		"| 200.001100 | 1 | 18.900 | 18.900 | 18.900 |")
	var none bytes.Buffer
	listWaits(&none, outs, "lg", 20*time.Millisecond)
	if strings.Count(none.String(), "\n") != 4 {
		t.Errorf("list over 20ms has rows:\n%s", none.String())
	}
}

// parseFixture parses a timehist text of testdata.
func parseFixture(t *testing.T, path string) []switchOut {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	outs, err := parse(f, false)
	if err != nil {
		t.Fatal(err)
	}
	return outs
}

// mustContain reports each of wants that the output named what lacks.
func mustContain(t *testing.T, what, got string, wants ...string) {
	t.Helper()
	for _, want := range wants {
		if !strings.Contains(got, want) {
			t.Errorf("%s lacks %q:\n%s", what, want, got)
		}
	}
}
