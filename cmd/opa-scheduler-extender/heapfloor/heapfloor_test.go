package heapfloor

import (
	"os"
	"runtime"
	"runtime/debug"
	"testing"
	"time"
)

func TestPercentFor(t *testing.T) {
	const mib = 1 << 20
	for _, tc := range []struct {
		name        string
		floor, live uint64
		base, want  int
	}{
		{"small heap reaches the floor", 64 * mib, 20 * mib, 100, 220},
		{"half the floor: GOGC's own goal", 64 * mib, 32 * mib, 100, 100},
		{"live past the floor", 64 * mib, 80 * mib, 100, 100},
		{"never below the process's GOGC", 64 * mib, 20 * mib, 300, 300},
		{"a tiny heap is capped", 64 * mib, 1024, 100, maxPercent},
		{"no reading yet", 64 * mib, 0, 100, 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := PercentFor(tc.floor, tc.live, tc.base); got != tc.want {
				t.Errorf("PercentFor(%d, %d, %d) = %d, want %d", tc.floor, tc.live, tc.base, got, tc.want)
			}
		})
	}
}

// TestFloorFollowsCollections: the percent is set at Start and kept after
// each collection while the live heap is below the floor, and Stop gives
// the process its GOGC back.
func TestFloorFollowsCollections(t *testing.T) {
	base := debug.SetGCPercent(100)
	defer debug.SetGCPercent(base)

	runtime.GC()        // the live heap is read from the last collection
	f := Start(1 << 30) // far above this test's live heap
	if f == nil {
		t.Fatal("Start returned no floor with GOGC=100")
	}
	if p := gcPercent(); p <= 100 || p != f.Percent() {
		t.Fatalf("after Start: GOGC %d, Percent %d; want the same, above 100", p, f.Percent())
	}
	// Another process part sets GOGC; the floor sets it again after the
	// next collection, which shows its cleanup ran.
	debug.SetGCPercent(100)
	deadline := time.Now().Add(10 * time.Second)
	for gcPercent() == 100 {
		if time.Now().After(deadline) {
			t.Fatal("the floor did not set GOGC again after collections")
		}
		runtime.GC()
		time.Sleep(time.Millisecond)
	}
	f.Stop()
	if p := gcPercent(); p != 100 {
		t.Errorf("after Stop: GOGC %d, want the 100 it started with", p)
	}
	f.Stop() // twice is fine
}

func TestNoFloor(t *testing.T) {
	if f := Start(0); f != nil {
		t.Error("Start(0) made a floor")
	}
	base := debug.SetGCPercent(-1)
	defer debug.SetGCPercent(base)
	if f := Start(64 << 20); f != nil {
		t.Error("Start made a floor with the collector off")
	}
	var f *Floor
	f.Stop()
	if f.Percent() != -1 {
		t.Error("a nil floor reports a percent")
	}
}

// TestSetDefaultPercent: the default applies when the environment names
// no GOGC, and an operator's GOGC is left as the runtime read it.
func TestSetDefaultPercent(t *testing.T) {
	base := debug.SetGCPercent(100)
	defer debug.SetGCPercent(base)

	t.Setenv("GOGC", "200") // restores the variable after the test
	debug.SetGCPercent(123) // what the runtime would have read from it
	if got := SetDefaultPercent(); got != 123 {
		t.Errorf("GOGC set in the environment: percent %d, want the 123 in effect", got)
	}

	if err := os.Unsetenv("GOGC"); err != nil {
		t.Fatal(err)
	}
	if got := SetDefaultPercent(); got != DefaultPercent {
		t.Errorf("GOGC unset: percent %d, want %d", got, DefaultPercent)
	}
}
