// Package drivers is the seam between the engine and the languages a
// ConstraintTemplate's code is written in, as Gatekeeper's constraint
// framework keeps its drivers apart from its client: the engine holds its
// Drivers by the engine name templates give their code and never branches
// on one; a driver compiles its templates into Programs, and the engine
// asks a Program what a constraint reads (to key its memo and cut the
// Nodes) and for the violation set of one review. A third engine is a
// package implementing Driver and one registration in the engine.
//
// The engine's fast path (memo keys, node classes, answer reuse, message
// placeholders) works from what Analyze says and from Eval alone, so an
// engine is a driver: drivers/rego and drivers/cel. This package knows neither
// the memo nor a request; drivers know neither the memo nor HTTP.
package drivers

import (
	"context"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/storage"
	"github.com/open-policy-agent/opa/v1/topdown"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/analysis"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/gatekeeper"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/inventory"
)

// Driver compiles the templates of one engine.
type Driver interface {
	// Engine names the code the driver compiles, as a template does
	// ("Rego", "K8sNativeValidation").
	Engine() string
	// Check compiles t alone, before its batch: its errors are its own,
	// never blamed on the policy set. The Program it may give (nil when
	// the driver compiles templates together) is Compile's to reuse.
	Check(t *gatekeeper.Template) (Program, error)
	// Compile compiles the driver's templates in force after a batch, by
	// name; prev is the set in force before it (nil: none yet), whose
	// Programs of templates the batch did not change may be kept, and
	// checked the Programs Check gave the batch's templates.
	Compile(ctx context.Context, prev Compiled, templates map[string]*gatekeeper.Template, checked map[*gatekeeper.Template]Program) (Compiled, error)
}

// Compiled is one driver's templates in force, compiled: immutable.
type Compiled interface {
	// Programs are the templates' Programs, by kind.
	Programs() map[string]Program
}

// StoreCompiled is a Compiled whose code the engine's store holds (the
// templates' Texts, as the embedded OPA SDK keeps policies): the engine
// hands its compiler to the SDK's plugin manager when the store's
// policies change, so that the manager does not compile them again.
type StoreCompiled interface {
	Compiled
	StoreCompiler() *ast.Compiler
}

// Program is a template's code compiled by its engine's driver. It is
// immutable and safe for concurrent use.
type Program interface {
	// Engine names the code's engine as a ConstraintTemplate does ("Rego",
	// "K8sNativeValidation").
	Engine() string
	// Analyze says what the template reads of the review and of the
	// candidate node and what it only prints, for a constraint with these
	// parameters (nil: the template alone, parameters unknown).
	Analyze(parameters ast.Value) *analysis.Result
	// Guards are the conditions every violation rule begins with, which a
	// review failing one of each rule's cannot violate (nil: none known).
	Guards() [][]analysis.Guard
	// InventoryReads is what the code can reach of data.inventory.
	InventoryReads() inventory.Reads
	// Eval gives the violation set of one review: its elements as the
	// code produced them (objects with msg and details, in Gatekeeper's
	// form). An error is the evaluation's: the caller fails closed.
	Eval(ctx context.Context, in Input) ([]any, error)
	// ListViolations says that Eval's elements are a list, kept in order
	// with their duplicates (CEL: one per failed validation), not a set.
	ListViolations() bool
	// ReadsConstraint says that Eval reads Input.Constraint, the whole
	// Constraint (CEL's params).
	ReadsConstraint() bool
	// Helper prepares a boolean function of the code that a constraint's
	// memo key stands in for (analysis.HelperOf), and says what decides
	// its answers, so that templates shipping the same function share
	// them.
	Helper(call analysis.HelperCall) (Helper, analysis.HelperDeps, error)
}

// Input is what one evaluation reads.
type Input struct {
	// Txn is the request's store transaction: data.inventory as the
	// request sees it.
	Txn storage.Transaction
	// Review is the admission review (input.review).
	Review *ast.Term
	// Parameters are the constraint's (input.parameters).
	Parameters ast.Value
	// Constraint is the whole Constraint with Parameters as its
	// spec.parameters, for engines that read it (CEL's params); nil for
	// those that do not.
	Constraint *unstructured.Unstructured
	// Nodes, when not nil, stand for data.inventory.cluster["v1"].Node:
	// the Nodes a request carries.
	Nodes *ast.Term
	// Cancel stops the evaluation when the request's context ends.
	Cancel topdown.Cancel
}

// Helper is a boolean function of a template's code, asked on one value.
type Helper interface {
	// Holds says whether the function holds on argument, with input.parameters
	// set to parameters.
	Holds(ctx context.Context, in HelperInput) (bool, error)
}

// HelperInput is what one helper call reads.
type HelperInput struct {
	Txn        storage.Transaction
	Parameters *ast.Term
	// Constraint is as Input's: the whole Constraint, for engines that
	// read it.
	Constraint *unstructured.Unstructured
	Argument   ast.Value
	Cancel     topdown.Cancel
}
