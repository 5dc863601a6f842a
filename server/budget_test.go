package server

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/iotest"
	"time"
)

func TestCompactJSON(t *testing.T) {
	cases := []struct{ in, want string }{
		{` { "a" : [ 1 , 2 ] } `, `{"a":[1,2]}`},
		{`{"s": " keep  \" this \\ "}`, `{"s":" keep  \" this \\ "}`},
		{"{\n\t\"a\":\r\n true }", `{"a":true}`},
		{`[1 2]`, `[1 2]`},     // stays malformed
		{`[tr ue]`, `[tr ue]`}, // stays malformed
		{`["x" "y"]`, `["x""y"]`},
		{`{"a":"\\"} `, `{"a":"\\"}`},
		{`   `, ``},
		{`"ü 日本  "`, `"ü 日本  "`},
	}
	for _, tc := range cases {
		for _, oneByte := range []bool{false, true} {
			var r io.Reader = strings.NewReader(tc.in)
			if oneByte {
				r = iotest.OneByteReader(r)
			}
			got, err := io.ReadAll(compactJSON(r))
			if err != nil || string(got) != tc.want {
				t.Errorf("compact(%q) one byte at a time %v = %q, %v; want %q", tc.in, oneByte, got, err, tc.want)
			}
		}
	}
}

// FuzzCompactJSON: compacting never changes what a body means, nor
// whether it is valid JSON.
func FuzzCompactJSON(f *testing.F) {
	for _, s := range []string{`{"a": [1, 2, "x y"]}`, `[1 2]`, `{"a":"\\\""}`, ` "\u00e9" `, `[-1 .5e3]`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		out, err := io.ReadAll(compactJSON(iotest.HalfReader(strings.NewReader(s))))
		if err != nil {
			t.Fatal(err)
		}
		if json.Valid([]byte(s)) != json.Valid(out) {
			t.Fatalf("valid(%q) = %v, valid(compacted %q) = %v", s, json.Valid([]byte(s)), out, json.Valid(out))
		}
		if json.Valid([]byte(s)) {
			var a, b any
			_ = json.Unmarshal([]byte(s), &a)
			_ = json.Unmarshal(out, &b)
			if fmt.Sprint(a) != fmt.Sprint(b) {
				t.Fatalf("%q decodes to %v, compacted %q to %v", s, a, out, b)
			}
		}
	})
}

// paddedBody is a filter request of size bytes, most of it white space
// between tokens, produced as it is read.
func paddedBody(size int64) io.Reader {
	head := `{"Pod":{"metadata":{"name":"p","namespace":"default","uid":"u"},"spec":{"containers":[{"name":"c","image":"nginx"}]}},"NodeNames":["node-1",`
	tail := `"node-2"]}`
	pad := size - int64(len(head)+len(tail))
	return io.MultiReader(strings.NewReader(head), io.LimitReader(spaces{}, pad), strings.NewReader(tail))
}

type spaces struct{}

func (spaces) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = ' '
	}
	return len(p), nil
}

func rssBytes() int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// TestLargeBodyStorm sends 16 large bodies at once: the budget admits what
// fits, the others wait and then get 429 with Retry-After; nothing fails
// with 5xx, memory stays within the budget above where it started, and
// the service answers normally afterwards.
func TestLargeBodyStorm(t *testing.T) {
	size := int64(60 << 20)
	if raceEnabled || testing.Short() {
		size = 12 << 20
	}
	budget := 2*size + 2<<20 // two bodies at a time
	s, _ := newTestServer(t, Options{MaxBodyBytes: size + 1<<20, MaxInFlightBodyBytes: budget, BodyWait: 300 * time.Millisecond})
	addr, _ := startServing(t, s, ListenConfig{})
	url := "http://" + addr + "/filter"

	baseline := rssBytes()
	var peak atomic.Int64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			if r := rssBytes(); r > peak.Load() {
				peak.Store(r)
			}
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	var wg sync.WaitGroup
	codes := make(chan int, 16)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequest(http.MethodPost, url, paddedBody(size))
			req.ContentLength = size
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Errorf("request: %v", err)
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusTooManyRequests && resp.Header.Get("Retry-After") == "" {
				t.Errorf("429 without Retry-After")
			}
			codes <- resp.StatusCode
		}()
	}
	wg.Wait()
	close(stop)
	<-sampled
	close(codes)
	count := map[int]int{}
	for c := range codes {
		count[c]++
	}
	t.Logf("%d bodies of %d MiB, budget %d MiB: answers %v; RSS %d MiB before, peak %d MiB", 16, size>>20, budget>>20, count, baseline>>20, peak.Load()>>20)
	for c := range count {
		if c != http.StatusOK && c != http.StatusTooManyRequests {
			t.Errorf("status %d in the storm, want only 200 and 429", c)
		}
	}
	if count[http.StatusOK] == 0 {
		t.Error("no request of the storm was served")
	}
	if grew := peak.Load() - baseline; grew > budget {
		t.Errorf("RSS grew by %d MiB, more than the %d MiB budget", grew>>20, budget>>20)
	}
	// Afterwards: a normal request is answered.
	resp, err := http.Post(url, "application/json", bytes.NewReader([]byte(validBody(t, "/filter"))))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("after the storm: status %d %s", resp.StatusCode, b)
	}
	if n := s.bodies.inUse(); n != 0 {
		t.Errorf("%d bytes still reserved after every request ended", n)
	}
}
