package main

import (
	"net"
	"runtime"
	"testing"
)

// outOfOrder reads a TCP connection's count from the kernel on Linux, and
// says it does not know for anything else.
func TestOutOfOrder(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		if c, err := ln.Accept(); err == nil {
			defer c.Close()
			_, _ = c.Write(make([]byte, 1<<16))
		}
	}()
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, ok := outOfOrder(conn); ok != (runtime.GOOS == "linux") {
		t.Errorf("TCP connection on %s: known %v", runtime.GOOS, ok)
	}
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if _, ok := outOfOrder(a); ok {
		t.Error("a pipe has no TCP_INFO, yet outOfOrder says it knows")
	}
}

func TestReorderedCount(t *testing.T) {
	known := func(reordered ...bool) workerResult {
		var r workerResult
		for _, x := range reordered {
			r.samples = append(r.samples, sample{reordered: x, tcpKnown: true})
		}
		return r
	}
	for _, tc := range []struct {
		name    string
		results []workerResult
		want    int // -1: not known
	}{
		{"none reordered", []workerResult{known(false, false)}, 0},
		{"over workers", []workerResult{known(true, false), known(true)}, 2},
		{"not known", []workerResult{known(true), {samples: []sample{{reordered: true}}}}, -1},
	} {
		got := -1
		if n := reorderedCount(tc.results); n != nil {
			got = *n
		}
		if got != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, got, tc.want)
		}
	}
}
