package rego

import (
	"context"
	"sync"

	"github.com/open-policy-agent/opa/v1/ast"
	oparego "github.com/open-policy-agent/opa/v1/rego"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/analysis"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/drivers"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/gatekeeper"
)

// helperArgument is the input key the argument is passed under. The
// analysis proves the function reads nothing of input but constants
// (its parameters), so no function sees it.
var helperArgument = ast.StringTerm("helper_argument")

// helperQueries are a program's prepared helper queries, by call: every
// constraint of the template with the same call shares one.
type helperQueries struct {
	mu      sync.Mutex
	byQuery map[string]*helperQuery
}

// helperQuery tests a function on input.helper_argument.
type helperQuery struct {
	query   oparego.PreparedEvalQuery
	program *Program
}

// Helper prepares (once per template and call) the query that tests the
// function on an argument, and gives the function's dependencies.
func (p *Program) Helper(h analysis.HelperCall) (drivers.Helper, analysis.HelperDeps, error) {
	deps := analysis.HelperDependencies(p.compiler, gatekeeper.TemplateRoot(p.t.Kind), h)
	terms := make([]*ast.Term, 0, len(h.Args)+1)
	terms = append(terms, ast.NewTerm(h.Func))
	for _, a := range h.Args {
		if analysis.IsArg(a) {
			a = ast.NewTerm(ast.InputRootRef.Append(helperArgument))
		}
		terms = append(terms, a)
	}
	body := ast.NewBody(ast.NewExpr(terms))
	key := body.String()
	p.helpers.mu.Lock()
	defer p.helpers.mu.Unlock()
	if q := p.helpers.byQuery[key]; q != nil {
		return q, deps, nil
	}
	q, err := oparego.New(oparego.ParsedQuery(body), oparego.Compiler(p.compiler), oparego.Store(p.store)).PrepareForEval(context.Background())
	if err != nil {
		return nil, deps, err
	}
	if p.helpers.byQuery == nil {
		p.helpers.byQuery = map[string]*helperQuery{}
	}
	hq := &helperQuery{query: q, program: p}
	p.helpers.byQuery[key] = hq
	return hq, deps, nil
}

// Holds evaluates the function on in.Argument.
func (q *helperQuery) Holds(ctx context.Context, in drivers.HelperInput) (bool, error) {
	input := ast.NewObject(ast.Item(termParameters, in.Parameters), ast.Item(helperArgument, ast.NewTerm(in.Argument)))
	rs, err := q.program.eval(ctx, &q.query, input, in.Txn, in.Cancel)
	if err != nil {
		return false, err
	}
	// A query's expression whose value is false still gives a result
	// (with that value); the body `not f(x)` tests both.
	return len(rs) > 0 && len(rs[0].Expressions) > 0 && rs[0].Expressions[0].Value != false, nil
}
