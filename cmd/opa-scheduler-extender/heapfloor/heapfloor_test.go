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
		name                   string
		floor, maxGrowth, live uint64
		base, want             int
	}{
		{"small heap reaches the floor", 64 * mib, 0, 20 * mib, 100, 220},
		{"half the floor: GOGC's own goal", 64 * mib, 0, 32 * mib, 100, 100},
		{"live past the floor", 64 * mib, 0, 80 * mib, 100, 100},
		{"never below the process's GOGC", 64 * mib, 0, 20 * mib, 300, 300},
		{"a tiny heap is capped", 64 * mib, 0, 1024, 100, maxPercent},
		{"no reading yet", 64 * mib, 0, 0, 100, 100},
		{"an operator's tiny GOGC stays", 64 * mib, 0, 80 * mib, 5, 5},
		// 80 MiB floor, 32 MiB growth, GOGC 75.
		{"growth bound, small heap: the floor", 80 * mib, 32 * mib, 20 * mib, 75, 300},
		{"growth bound, GOGC's goal within it", 80 * mib, 32 * mib, 40 * mib, 75, 100},
		{"growth bound, the floor above live+growth", 80 * mib, 32 * mib, 46 * mib, 75, 73},
		{"growth bound binds", 80 * mib, 32 * mib, 64 * mib, 75, 50},
		{"growth bound under GOGC 300", 80 * mib, 32 * mib, 64 * mib, 300, 50},
		{"growth bound on a huge heap", 80 * mib, 32 * mib, 1024 * mib, 75, minPercent},
		{"growth bound wider than GOGC's", 80 * mib, 512 * mib, 128 * mib, 75, 75},
		{"growth bound without a floor", 0, 32 * mib, 64 * mib, 75, 50},
		{"no floor, no bound", 0, 0, 64 * mib, 75, 75},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := PercentFor(tc.floor, tc.maxGrowth, tc.live, tc.base); got != tc.want {
				t.Errorf("PercentFor(%d, %d, %d, %d) = %d, want %d", tc.floor, tc.maxGrowth, tc.live, tc.base, got, tc.want)
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

	runtime.GC()         // the live heap is read from the last collection
	f := Start(1<<30, 0) // far above this test's live heap
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

// TestGrowthBoundAlone: with no floor, a growth bound still sets the
// percent (here below GOGC: this test's live heap is far above 1 KiB).
func TestGrowthBoundAlone(t *testing.T) {
	base := debug.SetGCPercent(100)
	defer debug.SetGCPercent(base)
	runtime.GC()
	f := Start(0, 1<<10)
	if f == nil {
		t.Fatal("Start(0, 1 KiB) made no floor")
	}
	defer f.Stop()
	if p := gcPercent(); p >= 100 || p != f.Percent() {
		t.Errorf("GOGC %d, Percent %d; want the same, below 100", p, f.Percent())
	}
}

func TestNoFloor(t *testing.T) {
	if f := Start(0, 0); f != nil {
		t.Error("Start(0, 0) made a floor")
	}
	base := debug.SetGCPercent(-1)
	defer debug.SetGCPercent(base)
	if f := Start(64<<20, 0); f != nil {
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
