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

// Capabilities are the builtins templates may call.
func (d *Driver) Capabilities() *ast.Capabilities { return d.caps }

// EmptyCompiler is the compiler of a policy set without templates.
func (d *Driver) EmptyCompiler() *ast.Compiler {
	return ast.NewCompiler().WithCapabilities(d.caps)
}

// CheckAlone compiles one template on its own, so that its errors are its
// own and never blamed on the policy set.
func (d *Driver) CheckAlone(t *gatekeeper.Template) error {
	modules, err := t.Modules()
	if err != nil {
		return err
	}
	c := ast.NewCompiler().WithCapabilities(d.caps).WithEnablePrintStatements(false)
	c.Compile(modules)
	if c.Failed() {
		return fmt.Errorf("%w: compile: %v", gatekeeper.ErrInvalidTemplate, c.Errors)
	}
	return nil
}

// Compile compiles the templates in force together, as the store will
// hold them, and prepares each one's Program, by kind.
func (d *Driver) Compile(ctx context.Context, templates map[string]*gatekeeper.Template) (*ast.Compiler, map[string]*Program, error) {
	modules := map[string]*ast.Module{}
	for _, t := range templates {
		ms, err := t.Modules()
		if err != nil {
			return nil, nil, err
		}
		maps.Copy(modules, ms)
	}
	c := ast.NewCompiler().WithCapabilities(d.caps).WithEnablePrintStatements(false)
	c.Compile(modules)
	if c.Failed() {
		return nil, nil, fmt.Errorf("%w: compile policy set: %v", gatekeeper.ErrInvalidTemplate, c.Errors)
	}
	programs := make(map[string]*Program, len(templates))
	for _, t := range templates {
		p, err := d.prepare(ctx, c, t)
		if err != nil {
			return nil, nil, fmt.Errorf("prepare template %s: %w", t.Name, err)
		}
		programs[t.Kind] = p
	}
	return c, programs, nil
}

// noMetrics spares each evaluation OPA's metrics (three maps and a timer
// per phase, about a tenth of what a one-off pod's evaluations
// allocated): nothing reads them.
var noMetrics = oparego.EvalMetrics(metrics.NoOp())

var _ drivers.Program = (*Program)(nil)
