// Package rego is the driver of Gatekeeper's Rego engine: it compiles the
// Rego of the templates in force into one compiler (as the embedded OPA
// SDK's store holds them), prepares each template's violation query, and
// evaluates it on a review, with the request's Nodes standing for the
// inventory's when the request carries them.
//
// It knows nothing of the memo, the node classes or a request: the engine
// asks through drivers.Program.
package rego

import (
	"context"
	"fmt"
	"maps"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/metrics"
	oparego "github.com/open-policy-agent/opa/v1/rego"
	"github.com/open-policy-agent/opa/v1/storage"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/drivers"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/gatekeeper"
)

// Engine is the engine name a ConstraintTemplate gives Rego code.
const Engine = "Rego"

// Driver compiles and prepares Rego templates against one store.
type Driver struct {
	caps    *ast.Capabilities
	store   storage.Store
	cancels cancelCache
}

// New is the driver of templates evaluated against store. Without
// allowNetwork, the builtins that reach the network or the host
// (http.send, net.lookup_ip_addr, opa.runtime) are refused at compile time.
func New(store storage.Store, allowNetwork bool) *Driver {
	return &Driver{caps: capabilities(allowNetwork), store: store}
}

func capabilities(allowNetwork bool) *ast.Capabilities {
	caps := ast.CapabilitiesForThisVersion()
	if allowNetwork {
		return caps
	}
	banned := map[string]bool{"http.send": true, "net.lookup_ip_addr": true, "opa.runtime": true}
	kept := caps.Builtins[:0:0]
	for _, b := range caps.Builtins {
		if !banned[b.Name] {
			kept = append(kept, b)
		}
	}
	caps.Builtins = kept
	return caps
}

// Engine is "Rego".
func (d *Driver) Engine() string { return Engine }

// Check compiles one template on its own, so that its errors are its own
// and never blamed on the policy set. It gives no Program: a template's
// Rego is compiled with the policy set's.
func (d *Driver) Check(t *gatekeeper.Template) (drivers.Program, error) {
	modules, err := t.Modules()
	if err != nil {
		return nil, err
	}
	c := ast.NewCompiler().WithCapabilities(d.caps).WithEnablePrintStatements(false)
	c.Compile(modules)
	if c.Failed() {
		return nil, fmt.Errorf("%w: compile: %v", gatekeeper.ErrInvalidTemplate, c.Errors)
	}
	return nil, nil
}

// Compile compiles the templates in force together, as the store will
// hold them, and prepares each one's Program, by kind.
func (d *Driver) Compile(ctx context.Context, _ drivers.Compiled, templates map[string]*gatekeeper.Template, _ map[*gatekeeper.Template]drivers.Program) (drivers.Compiled, error) {
	modules := map[string]*ast.Module{}
	for _, t := range templates {
		ms, err := t.Modules()
		if err != nil {
			return nil, err
		}
		maps.Copy(modules, ms)
	}
	c := ast.NewCompiler().WithCapabilities(d.caps).WithEnablePrintStatements(false)
	c.Compile(modules)
	if c.Failed() {
		return nil, fmt.Errorf("%w: compile policy set: %v", gatekeeper.ErrInvalidTemplate, c.Errors)
	}
	out := &compiled{compiler: c, programs: make(map[string]drivers.Program, len(templates))}
	for _, t := range templates {
		p, err := d.prepare(ctx, c, t)
		if err != nil {
			return nil, fmt.Errorf("prepare template %s: %w", t.Name, err)
		}
		out.programs[t.Kind] = p
	}
	return out, nil
}

// compiled is the policy set's Rego: one compiler, the store's.
type compiled struct {
	compiler *ast.Compiler
	programs map[string]drivers.Program
}

func (c *compiled) Programs() map[string]drivers.Program { return c.programs }
func (c *compiled) StoreCompiler() *ast.Compiler         { return c.compiler }

var (
	_ drivers.Driver        = (*Driver)(nil)
	_ drivers.StoreCompiled = (*compiled)(nil)
)

// noMetrics spares each evaluation OPA's metrics (three maps and a timer
// per phase, about a tenth of what a one-off pod's evaluations
// allocated): nothing reads them.
var noMetrics = oparego.EvalMetrics(metrics.NoOp())

var _ drivers.Program = (*Program)(nil)
