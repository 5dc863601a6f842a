package main

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/bench/perf"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/bench/perf/peerset"
)

// peerPods are the pods the framework reviews: replicas of k-1
// ReplicaSets spread over the list, then one one-off pod (new image and
// labels; not one the library denies everywhere).
func peerPods(seed uint64, k int) []perf.Pod {
	s := perf.NewStream(seed, 9999, 0)
	var out []perf.Pod
	for j := 0; j < k-1; j++ {
		out = append(out, s.Replica((j*3)%len(perf.ReplicaSets), 1000+j))
	}
	if k > 0 {
		out = append(out, s.OneOff(1))
	}
	return out
}

// comparePeer loads Gatekeeper's constraint framework with the engine's
// deny constraints, the Namespaces and the candidate nodes, then, per node
// count and per pod, times one ReviewPodOnNode per node, one after the
// other, and one filter request to the engine for the same pod; it checks
// that both deny the same nodes.
func comparePeer(ctx context.Context, f *flags, e *env, c *client, scenarios []Scenario) ([]PeerResult, error) {
	n := 0
	for _, x := range f.peerNodes {
		n = max(n, x)
	}
	deny := perf.DenyConstraints(e.engine)
	keep := deny
	if f.peerAll {
		// The same work as the engine's: every constraint reviewed; the
		// verdicts compared are the deny constraints'.
		keep = perf.ActiveConstraints(e.engine)
	}
	start := time.Now()
	p, loaded, err := peerset.Load(e.policies, keep, append(perf.Namespaces(), f.nodeSize.Nodes(n)...))
	if err != nil {
		return nil, err
	}
	logf("framework loaded with %d constraints (%d deny) and %d nodes in %.1fs", loaded, len(deny), n, time.Since(start).Seconds())
	user := perf.SchedulerUserInfo()
	pods := peerPods(f.seed, f.peerPods)
	var out []PeerResult
	for _, nodes := range f.peerNodes {
		names := perf.NodeNames(nodes)
		sc := scenario{verb: "filter", nodes: nodes}
		body := perf.NewArgsOf(f.nodeSize, nodes, false)
		r := PeerResult{Nodes: nodes, Constraints: loaded, Agree: true}
		var peerTotal, engineTotal time.Duration
		for _, pod := range pods {
			obj, err := perf.ServerView(pod.JSON)
			if err != nil {
				return nil, err
			}
			ns := perf.NamespaceObject(pod.Namespace)

			ans, engineD, err := c.post(ctx, "filter", body.Build(pod))
			if err != nil {
				return nil, err
			}
			outcome, err := checkFilter(ans, sc)
			if err != nil {
				return nil, err
			}

			pp := PeerPod{Pod: pod.Namespace + "/" + pod.Name, Kind: pod.Kind, EngineMs: ms(engineD)}
			t0 := time.Now()
			denied := map[string]bool{}
			messages := map[string][]string{}
			for _, name := range names {
				res, err := p.ReviewPodOnNode(ctx, obj, name, ns, user)
				if err != nil {
					pp.PeerError = err.Error()
					denied[name] = true
					continue
				}
				for _, x := range res {
					if !deny[x.ConstraintKind+"/"+x.ConstraintName] {
						continue // warn or dryrun at this enforcement point
					}
					denied[name] = true
					messages[name] = append(messages[name], "["+x.ConstraintName+"] "+x.Msg)
				}
			}
			peerD := time.Since(t0)
			pp.PeerMs = ms(peerD)
			pp.Denied = len(denied)
			for _, name := range names {
				msg, engineDenied := outcome.deniedNodes[name]
				if engineDenied != denied[name] {
					pp.Mismatch++
				} else if engineDenied && !sameMessages(msg, messages[name]) {
					if pp.MessageMismatch == 0 {
						logf("%s on %s: engine %q, framework %q", pp.Pod, name, msg, messages[name])
					}
					pp.MessageMismatch++
				}
			}
			if pp.Mismatch > 0 || pp.MessageMismatch > 0 || pp.PeerError != "" {
				r.Agree = false
				logf("framework and engine disagree on %s at %d nodes: %d nodes differ, %d messages differ (%s)", pp.Pod, nodes, pp.Mismatch, pp.MessageMismatch, pp.PeerError)
			}
			logf("%d nodes, %-40s framework %8.1f ms, engine %7.3f ms, %d nodes denied", nodes, pp.Pod, pp.PeerMs, pp.EngineMs, pp.Denied)
			peerTotal += peerD
			engineTotal += engineD
			r.Pods = append(r.Pods, pp)
		}
		k := time.Duration(len(pods))
		r.PeerMsPerPod = ms(peerTotal / k)
		r.SamePodsEngineMs = ms(engineTotal / k)
		if r.SamePodsEngineMs > 0 {
			r.SamePodsSpeedup = round1(r.PeerMsPerPod / r.SamePodsEngineMs)
		}
		for _, s := range scenarios {
			if s.Verb == "filter" && s.Mode == "names" && s.Nodes == nodes && s.MeanMs > 0 {
				r.EngineFilterMeanMs = s.MeanMs
				r.Ratio = s.MeanMs / r.PeerMsPerPod
				r.Speedup = round1(r.PeerMsPerPod / s.MeanMs)
			}
		}
		out = append(out, r)
	}
	return out, nil
}

// sameMessages compares a filter answer's message for a node (the deny
// violations as "[<constraint>] <msg>", joined by "; ", in the engine's
// order) with the framework's violations as "[<constraint>] <msg>", in
// any order.
func sameMessages(engine string, framework []string) bool {
	a := strings.Split(engine, "; ")
	b := strings.Split(strings.Join(framework, "; "), "; ")
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}
