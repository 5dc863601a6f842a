package server

import (
	"net/http"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa"
)

// ExplainRequest is the body of POST /debug/explain: a pod and the nodes to
// judge it on, by name (looked up in the engine's inventory) and/or as
// full Node objects. Names come first, then objects; duplicates are judged
// once.
type ExplainRequest struct {
	Pod       *v1.Pod   `json:"pod"`
	NodeNames []string  `json:"nodeNames,omitempty"`
	Nodes     []v1.Node `json:"nodes,omitempty"`
}

// ExplainResponse is the answer of POST /debug/explain.
type ExplainResponse struct {
	Pod              string `json:"pod"`
	EnforcementPoint string `json:"enforcementPoint"`
	Generation       uint64 `json:"generation"`
	// MatchedWarnConstraints is W of the scoring rule.
	MatchedWarnConstraints int           `json:"matchedWarnConstraints"`
	DurationNanos          time.Duration `json:"durationNanos"`
	Nodes                  []ExplainNode `json:"nodes"`
}

// ExplainNode is the verdict on one node.
type ExplainNode struct {
	Name string `json:"name"`
	// Verdict is "allowed", "denied" or "unknown" (not in the inventory).
	Verdict string `json:"verdict"`
	// Score is what /prioritize would answer (0..10).
	Score      int64                 `json:"score"`
	Violations []opa.Violation       `json:"violations,omitempty"`
	Trace      []opa.ConstraintTrace `json:"trace"`
}

// Explain verdicts.
const (
	VerdictAllowed = "allowed"
	VerdictDenied  = "denied"
	VerdictUnknown = "unknown"
)

// PoliciesResponse is the answer of GET /debug/policies.
type PoliciesResponse struct {
	opa.Status
	// Sources describe where policies and inventory come from (the policy
	// folder's files and their errors, the cluster's informers).
	Sources []any `json:"sources,omitempty"`
}

// handlePolicies answers GET /debug/policies with Policy.Status() and the
// sources' status.
func (s *Server) handlePolicies(w http.ResponseWriter, _ *http.Request) {
	resp := PoliciesResponse{Status: s.policy.Status()}
	for _, src := range s.debugSources {
		resp.Sources = append(resp.Sources, src())
	}
	writeJSON(w, http.StatusOK, resp)
}

// handleExplain answers POST /debug/explain.
func (s *Server) handleExplain(w http.ResponseWriter, r *http.Request) {
	if !requireMethod(w, r, http.MethodPost) {
		return
	}
	res, rerr := s.explain(w, r)
	if rerr != nil {
		if rerr.Status >= 500 {
			s.log.ErrorContext(r.Context(), "explain failed", "error", rerr.Msg)
		}
		writeJSON(w, rerr.Status, errorBody{Error: rerr.Msg})
		return
	}
	writeJSON(w, http.StatusOK, res)
}

func (s *Server) explain(w http.ResponseWriter, r *http.Request) (*ExplainResponse, *requestError) {
	var req ExplainRequest
	if rerr := s.decodeBody(w, r, &req, "ExplainRequest"); rerr != nil {
		return nil, rerr
	}
	key, rerr := checkTypedPod(req.Pod)
	if rerr != nil {
		return nil, rerr
	}
	if len(req.NodeNames) == 0 && len(req.Nodes) == 0 {
		return nil, badRequest(`give the nodes to judge the pod on: "nodeNames" and/or "nodes"`)
	}
	pod, rerr := podObject(req.Pod)
	if rerr != nil {
		return nil, rerr
	}
	seen := make(map[string]struct{}, len(req.NodeNames)+len(req.Nodes))
	cands := make([]opa.Candidate, 0, len(req.NodeNames)+len(req.Nodes))
	for i, n := range req.NodeNames {
		if n == "" {
			return nil, badRequest("nodeNames[%d] is empty", i)
		}
		if _, dup := seen[n]; !dup {
			seen[n] = struct{}{}
			cands = append(cands, opa.Candidate{Name: n})
		}
	}
	for i := range req.Nodes {
		n := &req.Nodes[i]
		if n.Name == "" {
			return nil, badRequest("nodes[%d] has no metadata.name", i)
		}
		if _, dup := seen[n.Name]; dup {
			continue
		}
		seen[n.Name] = struct{}{}
		obj, rerr := nodeObject(n)
		if rerr != nil {
			return nil, rerr
		}
		cands = append(cands, opa.Candidate{Name: n.Name, Object: obj})
	}

	ctx, cancel := s.withTimeout(r)
	defer cancel()
	start := time.Now()
	p, rerr := s.evaluate(ctx, opa.PlacementRequest{Pod: pod, Candidates: cands, Explain: true})
	if rerr != nil {
		return nil, rerr
	}
	res := &ExplainResponse{
		Pod:                    key,
		EnforcementPoint:       s.enforcementPoint,
		Generation:             p.Generation,
		MatchedWarnConstraints: p.MatchedWarnConstraints,
		DurationNanos:          time.Since(start),
		Nodes:                  make([]ExplainNode, len(p.Nodes)),
	}
	for i := range p.Nodes {
		v := &p.Nodes[i]
		n := ExplainNode{
			Name:       cands[i].Name,
			Verdict:    VerdictAllowed,
			Violations: p.Violations(i),
			Trace:      p.Trace(i),
		}
		switch {
		case v.Unknown:
			n.Verdict = VerdictUnknown
		case p.Denied(i):
			n.Verdict = VerdictDenied
		default:
			n.Score = clampScore(p.Score(i))
		}
		if n.Trace == nil {
			n.Trace = []opa.ConstraintTrace{}
		}
		res.Nodes[i] = n
	}
	return res, nil
}
