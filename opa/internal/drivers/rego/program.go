package rego

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/open-policy-agent/opa/v1/ast"
	oparego "github.com/open-policy-agent/opa/v1/rego"
	"github.com/open-policy-agent/opa/v1/storage"
	"github.com/open-policy-agent/opa/v1/topdown"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/analysis"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/drivers"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/gatekeeper"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/inventory"
)

// Program is one template's Rego, compiled with the policy set.
type Program struct {
	t        *gatekeeper.Template
	compiler *ast.Compiler
	store    storage.Store
	rules    []*ast.Rule
	// analysis is the template's, without any constraint's parameters.
	analysis *analysis.Result
	query    oparego.PreparedEvalQuery
	// overrideQuery evaluates with data.inventory.cluster.v1.Node replaced
	// by input.nodes, for requests that carry full Node objects.
	overrideQuery oparego.PreparedEvalQuery
	guards        [][]analysis.Guard
	invReads      inventory.Reads
	helpers       helperQueries
	cancels       *cancelCache
}

func (d *Driver) prepare(ctx context.Context, c *ast.Compiler, t *gatekeeper.Template) (*Program, error) {
	var rules []*ast.Rule
	for id := range t.Texts { // the ids of its modules
		rules = append(rules, c.Modules[id].Rules...)
	}
	root := gatekeeper.TemplateRoot(t.Kind)
	p := &Program{t: t, compiler: c, store: d.store, cancels: &d.cancels, rules: rules, analysis: analysis.Analyze(c, rules, root, nil),
		guards: analysis.Guards(rules, root), invReads: inventory.ReadsOf(rules)}
	var err error
	query := ast.NewBody(ast.NewExpr(ast.NewTerm(t.QueryRef())))
	if p.query, err = oparego.New(oparego.ParsedQuery(query), oparego.Compiler(c), oparego.Store(d.store)).PrepareForEval(ctx); err != nil {
		return nil, err
	}
	override := ast.MustParseBodyWithOpts(
		fmt.Sprintf("%s with input as input.review_input with data.inventory.cluster.v1.Node as input.nodes", t.QueryRef()),
		ast.ParserOptions{RegoVersion: ast.RegoV1})
	if p.overrideQuery, err = oparego.New(oparego.ParsedQuery(override), oparego.Compiler(c), oparego.Store(d.store)).PrepareForEval(ctx); err != nil {
		return nil, err
	}
	return p, nil
}

// ReadsConstraint: Rego reads input.parameters, never the whole
// Constraint.
func (p *Program) ReadsConstraint() bool { return false }

// Template is the template the program was compiled from.
func (p *Program) Template() *gatekeeper.Template { return p.t }

// Engine is "Rego".
func (p *Program) Engine() string { return Engine }

// Analyze runs the analysis of package internal/analysis on the
// template's rules, with the constraint's parameters as constants.
func (p *Program) Analyze(parameters ast.Value) *analysis.Result {
	if parameters == nil {
		return p.analysis
	}
	return analysis.Analyze(p.compiler, p.rules, gatekeeper.TemplateRoot(p.t.Kind), parameters)
}

// Guards are the conditions each violation rule begins with.
func (p *Program) Guards() [][]analysis.Guard { return p.guards }

// InventoryReads are the inventory kinds the rules can reach.
func (p *Program) InventoryReads() inventory.Reads { return p.invReads }

var (
	termReview      = ast.StringTerm("review")
	termParameters  = ast.StringTerm("parameters")
	termReviewInput = ast.StringTerm("review_input")
	termNodes       = ast.StringTerm("nodes")
)

// ListViolations: a violation rule is a set.
func (p *Program) ListViolations() bool { return false }

// Eval evaluates the violation rule on in.
func (p *Program) Eval(ctx context.Context, in drivers.Input) ([]any, error) {
	input := ast.NewObject(ast.Item(termReview, in.Review), ast.Item(termParameters, ast.NewTerm(in.Parameters)))
	query := p.query
	if in.Nodes != nil {
		input = ast.NewObject(ast.Item(termReviewInput, ast.NewTerm(input)), ast.Item(termNodes, in.Nodes))
		query = p.overrideQuery
	}
	rs, err := p.eval(ctx, &query, input, in.Txn, in.Cancel)
	if err != nil {
		return nil, err
	}
	if len(rs) == 0 || len(rs[0].Expressions) == 0 {
		return nil, nil
	}
	items, ok := rs[0].Expressions[0].Value.([]any)
	if !ok {
		return nil, fmt.Errorf("violation is not a set: %T", rs[0].Expressions[0].Value)
	}
	return items, nil
}

// eval runs q on input: the options in an array of this frame, not a
// slice grown per evaluation.
func (p *Program) eval(ctx context.Context, q *oparego.PreparedEvalQuery, input ast.Value, txn storage.Transaction, cancel topdown.Cancel) (oparego.ResultSet, error) {
	opts := [4]oparego.EvalOption{oparego.EvalParsedInput(input), oparego.EvalTransaction(txn), noMetrics}
	n := 3
	if cancel != nil {
		opts[3] = p.cancels.option(cancel)
		n = 4
	}
	return q.Eval(ctx, opts[:n]...)
}

// cancelCache keeps the option form of the last request's Cancel: a
// request's evaluations share one, as they share the Cancel, instead of
// wrapping it anew for each of them. Requests running at once replace
// each other's; the option is a pure function of the Cancel either way.
type cancelCache struct{ last atomic.Pointer[cancelOption] }

type cancelOption struct {
	cancel topdown.Cancel
	opt    oparego.EvalOption
}

func (c *cancelCache) option(cancel topdown.Cancel) oparego.EvalOption {
	if last := c.last.Load(); last != nil && last.cancel == cancel {
		return last.opt
	}
	o := &cancelOption{cancel: cancel, opt: oparego.EvalExternalCancel(cancel)}
	c.last.Store(o)
	return o.opt
}
