package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	extenderv1 "k8s.io/kube-scheduler/extender/v1"
)

func TestPassedNodes(t *testing.T) {
	for _, tc := range []struct {
		name, answer string
		field        string
		count        int
		err          bool
	}{
		{name: "names first", answer: `{"Nodes":null,"NodeNames":["a","b","c"],"FailedNodes":null,"FailedAndUnresolvableNodes":{"d":"x"},"Error":""}`, field: "NodeNames", count: 3},
		{name: "denials first", answer: ` { "FailedAndUnresolvableNodes" : {"d":"say \"no\", ]}"}, "Error":"", "NodeNames" : [ "a" , "b\\"]" ] } `, field: "NodeNames", count: 2},
		{name: "none passed", answer: `{"Nodes":null,"NodeNames":[],"FailedAndUnresolvableNodes":{"a":"x","b":"y"}}`, field: "NodeNames", count: 0},
		{name: "neither field", answer: `{"FailedNodes":{"a":"unknown"},"Error":"","n":-1.5e3,"t":true}`, count: 0},
		{name: "node objects", answer: `{"Nodes":{"metadata":{},"items":[{"metadata":{"name":"a","labels":{"x":"]"}}},{"metadata":{"name":"b"}}]},"NodeNames":null}`, field: "Nodes", count: 2},
		{name: "node list without items", answer: `{"Nodes":{"metadata":{}}}`, field: "Nodes", count: 0},
		{name: "not an object", answer: `["a"]`, err: true},
		{name: "cut short", answer: `{"NodeNames":["a","b"`, err: true},
		{name: "unterminated string", answer: `{"NodeNames":["a`, err: true},
		{name: "missing colon", answer: `{"NodeNames" ["a"]}`, err: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := passedNodes([]byte(tc.answer))
			if tc.err {
				if !errors.Is(err, errSyntax) {
					t.Fatalf("passedNodes(%s) = %+v, %v; want a syntax error", tc.answer, p, err)
				}
				return
			}
			if err != nil || p.field != tc.field || p.count != tc.count {
				t.Fatalf("passedNodes(%s) = field %q count %d, %v; want %q %d", tc.answer, p.field, p.count, err, tc.field, tc.count)
			}
		})
	}
}

// TestPrioritizeBody checks the prioritize request with the upstream wire
// type: the pod, and exactly the nodes the filter answer passed.
func TestPrioritizeBody(t *testing.T) {
	pod := []byte(`{"metadata":{"name":"p","namespace":"ns"}}`)
	for _, tc := range []struct {
		answer string
		names  []string
		items  int
	}{
		{answer: `{"Nodes":null,"NodeNames":["a","b\"c"],"FailedAndUnresolvableNodes":{"d":"no"}}`, names: []string{"a", `b"c`}},
		{answer: `{"Nodes":{"metadata":{},"items":[{"metadata":{"name":"a"}},{"metadata":{"name":"b"}},{"metadata":{"name":"c"}}]},"NodeNames":null}`, items: 3},
	} {
		p, err := passedNodes([]byte(tc.answer))
		if err != nil || !p.scored() {
			t.Fatalf("passedNodes(%s) = %+v, %v", tc.answer, p, err)
		}
		var args extenderv1.ExtenderArgs
		body := p.prioritizeBody(new(bytes.Buffer), pod)
		if err := json.Unmarshal(body, &args); err != nil {
			t.Fatalf("prioritize body %s: %v", body, err)
		}
		if args.Pod == nil || args.Pod.Name != "p" || args.Pod.Namespace != "ns" {
			t.Errorf("prioritize body %s: wrong pod", body)
		}
		switch {
		case tc.names != nil:
			if args.NodeNames == nil || len(*args.NodeNames) != len(tc.names) || (*args.NodeNames)[1] != tc.names[1] || args.Nodes != nil {
				t.Errorf("prioritize body %s: NodeNames %v, want %q", body, args.NodeNames, tc.names)
			}
		case args.Nodes == nil || len(args.Nodes.Items) != tc.items || args.NodeNames != nil:
			t.Errorf("prioritize body %s: want %d Nodes", body, tc.items)
		}
	}
	if (passed{count: 1}).scored() || (passed{}).scored() {
		t.Error("the scheduler scores two or more feasible nodes only")
	}
}

// TestCycleTimesEachCall: a cycle's time is its filter's and its
// prioritize's added, and its longest call is the longer of the two, each
// as the server took it.
func TestCycleTimesEachCall(t *testing.T) {
	const filterDelay, prioritizeDelay = 30 * time.Millisecond, 10 * time.Millisecond
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/filter":
			time.Sleep(filterDelay)
			_, _ = io.WriteString(w, `{"NodeNames":["a","b"],"FailedAndUnresolvableNodes":{"c":"no"}}`)
		case "/prioritize":
			time.Sleep(prioritizeDelay)
			_, _ = io.WriteString(w, `[{"Host":"a","Score":1},{"Host":"b","Score":0}]`)
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	w, err := dialWire(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer w.close()
	c := newClient(srv.URL, 1)
	pod := []byte(`{"metadata":{"name":"p","namespace":"ns"}}`)
	body := []byte(`{"Pod":` + string(pod) + `,"NodeNames":["a","b","c"]}`)
	out, err := c.send(w, scenario{verb: "cycle", nodes: 3}, body, pod, new(bytes.Buffer), new(bytes.Buffer))
	if err != nil {
		t.Fatal(err)
	}
	if out.scored != 2 || out.longest < filterDelay || out.d < filterDelay+prioritizeDelay || out.longest > out.d-prioritizeDelay {
		t.Errorf("cycle %v, longest call %v, %d nodes scored: want filter (%v) and prioritize (%v) added, the longest the filter's, 2 scored",
			out.d, out.longest, out.scored, filterDelay, prioritizeDelay)
	}
}
