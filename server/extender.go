package server

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"runtime/trace"
	"sort"
	"time"

	"k8s.io/apimachinery/pkg/types"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa"
)

// Verb names, as the scheduler's filterVerb, prioritizeVerb, preemptVerb
// and bindVerb; also the values of the "verb" metric label.
const (
	verbFilter     = "filter"
	verbPrioritize = "prioritize"
	verbPreempt    = "preempt"
	verbBind       = "bind"
)

// startCall begins a verb's call. The call is a region of a runtime trace
// (/debug/pprof/trace, with --enable-pprof) named for its verb, so that a
// trace shows each call's running, waiting and collector time; a region
// costs nothing while no trace runs.
func startCall(r *http.Request, verb string) *verbCall {
	return &verbCall{verb: verb, start: time.Now(), region: trace.StartRegion(r.Context(), verb)}
}

// endCall ends the call's trace region and records a panicking call as an
// error before the recoverer answers it. It must be deferred directly.
func (s *Server) endCall(c *verbCall) {
	c.region.End()
	if p := recover(); p != nil {
		s.metrics.observe(c.verb, resultError, time.Since(c.start))
		panic(p)
	}
}

// maxLoggedReasons caps the sample of rejection reasons in the filter log line.
const maxLoggedReasons = 3

func filterError(msg string) any     { return &extenderv1.ExtenderFilterResult{Error: msg} }
func prioritizeError(msg string) any { return errorBody{Error: msg} }
func preemptError(msg string) any    { return errorBody{Error: msg} }
func bindError(msg string) any       { return &extenderv1.ExtenderBindingResult{Error: msg} }

// placeArgs decodes and evaluates the ExtenderArgs of filter and prioritize.
// The pod is read straight into the engine's values (opa.DecodePod), never
// into a typed Pod: args.Pod stays nil, the pod is returned apart.
func (s *Server) placeArgs(w http.ResponseWriter, r *http.Request, c *verbCall) (*extenderArgsWire, *opa.Pod, nodeArgs, *opa.Placement, *requestError) {
	wire, release, rerr := s.decodeExtenderArgs(w, r)
	// The handler gives the body back once it has answered: the answer
	// echoes the Nodes that pass, which point into it.
	c.releaseBody = release
	if rerr != nil {
		return nil, nil, nodeArgs{}, nil, rerr
	}
	c.nameLists = wire.names // the handler gives them back once it has answered
	pod, rerr := s.decodePod(wire.Pod, "ExtenderArgs")
	if rerr != nil {
		return nil, nil, nodeArgs{}, nil, rerr
	}
	key, rerr := checkPod(pod.Name(), pod.Namespace())
	if rerr != nil {
		return nil, nil, nodeArgs{}, nil, rerr
	}
	c.pod = key
	na, rerr := parseNodes(&wire)
	if rerr != nil {
		return nil, nil, nodeArgs{}, nil, rerr
	}
	c.nodes = len(na.names)
	if len(na.names) == 0 {
		return &wire, pod, na, &opa.Placement{}, nil
	}
	buf := candidateBuffers.Get()
	defer func() {
		clear(*buf) // nodes and names of this request: not the list's to keep (past its length it is zero)
		candidateBuffers.Put(buf)
	}()
	cands := na.candidates(&wire, *buf)
	*buf = cands
	ctx, cancel := s.withTimeout(r)
	defer cancel()
	// filter keeps its answer for the prioritize call that follows it for
	// the same pod; prioritize takes it (it changes scores only).
	reuse := opa.ReuseKeep
	if c.verb == verbPrioritize {
		reuse = opa.ReuseTake
	}
	p, rerr := s.evaluate(ctx, opa.PlacementRequest{Decoded: pod, Candidates: cands, Reuse: reuse})
	if rerr != nil {
		return nil, nil, nodeArgs{}, nil, rerr
	}
	s.metrics.evaluated(c.verb, len(na.names))
	c.uid, c.names, c.placement = pod.UID(), na.names, p
	return &wire, pod, na, p, nil
}

// handleFilter answers POST /filter: denied nodes go to
// FailedAndUnresolvableNodes, unknown nodes to FailedNodes, the others pass,
// in the mode (NodeNames or Nodes) and order of the request.
func (s *Server) handleFilter(w http.ResponseWriter, r *http.Request) {
	if !requireMethod(w, r, http.MethodPost) {
		return
	}
	c := startCall(r, verbFilter)
	defer s.endCall(c)
	defer c.releaseRequest() // set by placeArgs
	args, pod, na, p, rerr := s.placeArgs(w, r, c)
	if rerr != nil {
		s.finish(w, r, c, nil, rerr, filterError)
		return
	}

	buf := filterBuffersPool.Get()
	defer buf.release()
	res := &filterAnswer{}
	passed := buf.passed[:0] // indexes into na.names
	var denied, unknown int
	for i := range p.Nodes {
		v := &p.Nodes[i]
		name := na.names[i] // never a name the request did not carry
		switch {
		case v.Unknown:
			res.failed = append(res.failed, failedNode{name: name, reason: unknownNodeReason})
			unknown++
		case p.Denied(i):
			if res.unresolvable == nil {
				res.unresolvable = buf.unresolvable[:0]
			}
			res.unresolvable = append(res.unresolvable, failedNode{name: name, placement: p, index: i})
			denied++
		default:
			passed = append(passed, i)
		}
	}
	buf.passed, buf.unresolvable = passed, res.unresolvable
	s.metrics.countDecisions(verbFilter, p)
	s.metrics.rejected(verbFilter, denied, unknown)
	c.rejected = denied + unknown

	// Answer in the request's mode: a list given in the request is
	// answered (empty unless it was the one judged). Both lists nil (an
	// empty question) is answered with both nil: the scheduler reads that
	// as "no node passes", which is all there is.
	if args.NodeNames != nil {
		out := []string{}
		if !na.full {
			out = extend(buf.names, len(passed)) // never nil: written as []
			for j, i := range passed {
				out[j] = na.names[i]
			}
			buf.names = out
		}
		res.nodeNames = &out
	}
	if args.Nodes != nil {
		out := &nodeListWire{TypeMeta: args.Nodes.TypeMeta, ListMeta: args.Nodes.ListMeta}
		if na.full {
			out.Items = make([]json.RawMessage, len(passed))
			for j, i := range passed {
				out.Items[j] = args.Nodes.Items[na.items[i]]
			}
		}
		res.nodes = out
	}

	if denied > 0 && s.onRejected != nil {
		s.onRejected(pod.Namespace(), pod.Name(), types.UID(pod.UID()))
	}
	// Denials are the policies at work: logged at debug level (metrics
	// count them, --log-decisions records them). Nodes the service does
	// not know are not: logged at info level.
	level := slog.LevelDebug
	if unknown > 0 {
		level = slog.LevelInfo
	}
	if c.rejected > 0 && s.log.Enabled(r.Context(), level) {
		s.log.Log(r.Context(), level, "pod rejected on some nodes",
			"pod", c.pod, "nodes", len(na.names), "rejected", c.rejected,
			"denied", denied, "unknown", unknown, "passed", len(passed),
			"policyGeneration", p.Generation,
			"sample", rejectionSample(p, na.names))
	}
	s.finish(w, r, c, res, nil, filterError)
	p.Release() // written and recorded: its memory serves the next answers
}

// rejectionSample is the first maxLoggedReasons rejected nodes of p, with
// their reasons, for the log.
func rejectionSample(p *opa.Placement, names []string) []string {
	var sample []string
	for i := range p.Nodes {
		if len(sample) == maxLoggedReasons {
			break
		}
		switch {
		case p.Nodes[i].Unknown:
			sample = append(sample, names[i]+": "+unknownNodeReason)
		case p.Denied(i):
			sample = append(sample, names[i]+": "+p.DenyMessage(i))
		}
	}
	return sample
}

// handlePrioritize answers POST /prioritize with a HostPriorityList in the
// request's order (scoreAnswer says how each node scores).
func (s *Server) handlePrioritize(w http.ResponseWriter, r *http.Request) {
	if !requireMethod(w, r, http.MethodPost) {
		return
	}
	c := startCall(r, verbPrioritize)
	defer s.endCall(c)
	defer c.releaseRequest() // set by placeArgs
	_, _, na, p, rerr := s.placeArgs(w, r, c)
	if rerr != nil {
		s.finish(w, r, c, nil, rerr, prioritizeError)
		return
	}
	s.metrics.countDecisions(verbPrioritize, p)
	s.finish(w, r, c, scoreAnswer{names: na.names, p: p}, nil, prioritizeError)
	p.Release() // written and recorded: its memory serves the next answers
}

func clampScore(x int64) int64 {
	return max(extenderv1.MinExtenderPriority, min(extenderv1.MaxExtenderPriority, x))
}

// handlePreempt answers POST /preempt: the pod is evaluated on the
// candidate nodes (by name: preemption arguments carry no Node objects, so
// the engine's inventory must know them); nodes where it is denied or that
// the engine does not know are dropped, which vetoes preemption there; the
// others keep their victims, as MetaVictims (pod UIDs and the PDB
// violation count). Nodes without victims are dropped too (see preempt).
func (s *Server) handlePreempt(w http.ResponseWriter, r *http.Request) {
	if !requireMethod(w, r, http.MethodPost) {
		return
	}
	c := startCall(r, verbPreempt)
	defer s.endCall(c)
	res, rerr := s.preempt(w, r, c)
	if rerr != nil {
		s.finish(w, r, c, nil, rerr, preemptError)
		return
	}
	s.finish(w, r, c, res, nil, preemptError)
}

func (s *Server) preempt(w http.ResponseWriter, r *http.Request, c *verbCall) (*extenderv1.ExtenderPreemptionResult, *requestError) {
	var args extenderv1.ExtenderPreemptionArgs
	if rerr := s.decodeBody(w, r, &args, "ExtenderPreemptionArgs"); rerr != nil {
		return nil, rerr
	}
	key, rerr := checkTypedPod(args.Pod)
	if rerr != nil {
		return nil, rerr
	}
	c.pod = key

	// The scheduler sends one of the two maps (NodeNameToMetaVictims when
	// nodeCacheCapable); accept both, MetaVictims winning for a node in both.
	victims := make(map[string]*extenderv1.MetaVictims, len(args.NodeNameToVictims)+len(args.NodeNameToMetaVictims))
	for name, v := range args.NodeNameToVictims {
		victims[name] = metaVictims(v)
	}
	for name, mv := range args.NodeNameToMetaVictims {
		victims[name] = cleanMetaVictims(mv)
	}
	names := make([]string, 0, len(victims))
	for name, mv := range victims {
		if name == "" {
			return nil, badRequest("preemption candidates include an empty node name")
		}
		// kube-scheduler fails the preemption ("expected at least one
		// victim pod on node") when an extender answers a node without
		// victims; it never sends one, but if it does, drop it.
		if len(mv.Pods) == 0 {
			continue
		}
		names = append(names, name)
	}
	sort.Strings(names) // a stable order for the engine and the logs
	c.nodes = len(names)

	res := &extenderv1.ExtenderPreemptionResult{NodeNameToMetaVictims: map[string]*extenderv1.MetaVictims{}}
	if len(names) == 0 {
		return res, nil
	}
	pod, rerr := podObject(args.Pod)
	if rerr != nil {
		return nil, rerr
	}
	cands := make([]opa.Candidate, len(names))
	for i, n := range names {
		cands[i].Name = n
	}
	ctx, cancel := s.withTimeout(r)
	defer cancel()
	p, rerr := s.evaluate(ctx, opa.PlacementRequest{Pod: pod, Candidates: cands})
	if rerr != nil {
		return nil, rerr
	}
	s.metrics.evaluated(verbPreempt, len(names))
	var denied, unknown int
	for i := range p.Nodes {
		v := &p.Nodes[i]
		switch {
		case v.Unknown:
			unknown++
		case p.Denied(i):
			denied++
		default:
			res.NodeNameToMetaVictims[names[i]] = victims[names[i]]
		}
	}
	s.metrics.countDecisions(verbPreempt, p)
	s.metrics.rejected(verbPreempt, denied, unknown)
	c.rejected = denied + unknown
	return res, nil
}

// metaVictims converts full victims to the UIDs the scheduler resolves.
func metaVictims(v *extenderv1.Victims) *extenderv1.MetaVictims {
	mv := &extenderv1.MetaVictims{}
	if v == nil {
		return mv
	}
	mv.NumPDBViolations = v.NumPDBViolations
	mv.Pods = make([]*extenderv1.MetaPod, 0, len(v.Pods))
	for _, p := range v.Pods {
		if p != nil {
			mv.Pods = append(mv.Pods, &extenderv1.MetaPod{UID: string(p.UID)})
		}
	}
	return mv
}

// cleanMetaVictims drops nil entries, which the scheduler would dereference.
func cleanMetaVictims(mv *extenderv1.MetaVictims) *extenderv1.MetaVictims {
	if mv == nil {
		return &extenderv1.MetaVictims{}
	}
	for _, p := range mv.Pods {
		if p == nil {
			out := &extenderv1.MetaVictims{NumPDBViolations: mv.NumPDBViolations}
			for _, p := range mv.Pods {
				if p != nil {
					out.Pods = append(out.Pods, p)
				}
			}
			return out
		}
	}
	return mv
}

// noBinderMessage is the bind Error when no cluster is configured.
const noBinderMessage = "binding is not available: no cluster configured (--kubeconfig)"

// handleBind answers POST /bind: it fetches the pod, re-checks the chosen
// node against the current policy (the policy may have changed since
// filter) and binds. A refused or failed bind is HTTP 200 with Error set,
// so the scheduler logs the reason; malformed arguments are 400 and engine
// failures 500. A node the engine does not know is not a reason to refuse
// (filter already judged it, possibly from a full Node object).
func (s *Server) handleBind(w http.ResponseWriter, r *http.Request) {
	if !requireMethod(w, r, http.MethodPost) {
		return
	}
	c := startCall(r, verbBind)
	defer s.endCall(c)
	rerr := s.bind(w, r, c)
	if rerr != nil {
		s.finish(w, r, c, nil, rerr, bindError)
		return
	}
	s.finish(w, r, c, &extenderv1.ExtenderBindingResult{}, nil, bindError)
}

// refuse is a bind answered with HTTP 200 and Error set.
func refuse(format string, args ...any) *requestError {
	rerr := badRequest(format, args...)
	rerr.Status = http.StatusOK
	return rerr
}

func (s *Server) bind(w http.ResponseWriter, r *http.Request, c *verbCall) *requestError {
	var args extenderv1.ExtenderBindingArgs
	if rerr := s.decodeBody(w, r, &args, "ExtenderBindingArgs"); rerr != nil {
		return rerr
	}
	switch {
	case args.PodName == "":
		return badRequest("binding has no PodName")
	case args.PodNamespace == "":
		return badRequest("binding of pod %q has no PodNamespace", args.PodName)
	case args.Node == "":
		return badRequest("binding of pod %s/%s has no Node", args.PodNamespace, args.PodName)
	}
	c.pod = args.PodNamespace + "/" + args.PodName
	c.nodes = 1
	if s.binder == nil {
		return refuse(noBinderMessage)
	}
	ctx, cancel := s.withTimeout(r)
	defer cancel()

	pod, err := s.binder.GetPod(ctx, args.PodNamespace, args.PodName)
	if err != nil {
		return refuse("cannot bind pod %s to node %s: get pod: %v", c.pod, args.Node, err)
	}
	if pod == nil {
		return refuse("cannot bind pod %s to node %s: pod not found", c.pod, args.Node)
	}
	if args.PodUID != "" && pod.UID != args.PodUID {
		return refuse("cannot bind pod %s to node %s: the pod has UID %s, the binding is for UID %s (pod recreated)",
			c.pod, args.Node, pod.UID, args.PodUID)
	}
	if pod.Spec.NodeName != "" {
		if pod.Spec.NodeName == args.Node {
			return nil // a retried bind that already succeeded
		}
		return refuse("cannot bind pod %s to node %s: already bound to node %s", c.pod, args.Node, pod.Spec.NodeName)
	}
	// The fetched pod may lack what the wire pod had only if it changed;
	// it is the current truth, so it is what the policy judges.
	if pod.Namespace == "" {
		pod.Namespace = args.PodNamespace
	}
	if pod.Name == "" {
		pod.Name = args.PodName
	}
	obj, rerr := podObject(pod)
	if rerr != nil {
		rerr.Status = http.StatusInternalServerError
		return rerr
	}
	p, rerr := s.evaluate(ctx, opa.PlacementRequest{Pod: obj, Candidates: []opa.Candidate{{Name: args.Node}}})
	if rerr != nil {
		return rerr
	}
	s.metrics.evaluated(verbBind, 1)
	s.metrics.countDecisions(verbBind, p)
	c.uid, c.names, c.placement = string(pod.UID), []string{args.Node}, p
	if p.Denied(0) {
		s.metrics.rejected(verbBind, 1, 0)
		c.rejected = 1
		return refuse("node %s is denied for pod %s by the current policy: %s", args.Node, c.pod, p.DenyMessage(0))
	}
	if err := s.binder.Bind(ctx, args.PodNamespace, args.PodName, args.PodUID, args.Node); err != nil {
		return refuse("cannot bind pod %s to node %s: %v", c.pod, args.Node, err)
	}
	return nil
}
