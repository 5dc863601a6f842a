package cel

import (
	"context"
	"sort"
	"sync"

	celgo "github.com/google/cel-go/cel"
	celtypes "github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"k8s.io/apiserver/pkg/cel/environment"
	"k8s.io/apiserver/pkg/cel/lazy"
)

// A membership's test with its variables computed once per Constraint.
// The variables a test reads are params-only (membership.go): they are the
// same for every value a Constraint's helper is asked about, yet the API
// server's composition computes them anew in every evaluation (the
// library's exemptImagePrefixes and exemptImageExplicit filter and map
// the Constraint's exemptImages each time: two thirds of a helper's
// answer). A fastTest computes them once per Constraint, with the
// driver's plain environment, and evaluates the test with their values.
//
// Its answer is used only when it is a boolean within the cost budget
// that the composition would have: any error, a result that is not a
// boolean, or a cost that with the variables' exceeds the per-call limit
// sends the value through the composited test (memberHelper.test), whose
// answer is the reference. A boolean is the composition's boolean: the
// expressions are the template's own, type-checked in its environment
// before any plain program is made (fastTestOf), the values the same
// CEL values (the Constraint's object as params), and CEL's operators
// decide on values, not on the types the checker saw.

// fastTest is a membership's test with its variables kept per Constraint.
type fastTest struct {
	test celgo.Program
	// names are the variables the test reads (params first), vars their
	// programs.
	names []string
	vars  []celgo.Program

	mu sync.RWMutex
	// byConstraint holds the variables' values per Constraint object (a
	// bound constraint's object is made once and never changed), at most
	// maxKeptConstraints of them.
	byConstraint map[*unstructured.Unstructured]*keptVariables
}

// keptVariables are a Constraint's values of a test's variables (an
// evaluation error kept as its error value, which the test meets only if
// it reads the variable, as under the composition), and what computing
// them cost.
type keptVariables struct {
	values ref.Val
	cost   uint64
}

// maxKeptConstraints bounds a fastTest's table: a template has a few
// Constraints; past the bound (Constraints replaced many times over) the
// table starts over.
const maxKeptConstraints = 64

// plainEnv is the driver's environment for fast tests: the base
// environment (its libraries, cost tracking and per-call limit) with
// object, params and variables as dynamic values.
func (d *Driver) plainEnv() (*celgo.Env, error) {
	d.plain.once.Do(func() {
		base, err := d.envs.Env(environment.StoredExpressions)
		if err != nil {
			d.plain.err = err
			return
		}
		d.plain.env, d.plain.err = base.Extend(
			celgo.Variable("object", celgo.DynType),
			celgo.Variable("params", celgo.DynType),
			celgo.Variable("variables", celgo.MapType(celgo.StringType, celgo.DynType)))
		d.plain.programs = map[string]celgo.Program{}
	})
	return d.plain.env, d.plain.err
}

// plainPrograms are the driver's fast-test programs by expression: the
// library's pod-security templates share their tests and variables, so
// one program serves them all.
type plainPrograms struct {
	once     sync.Once
	env      *celgo.Env
	err      error
	mu       sync.Mutex
	programs map[string]celgo.Program
}

// maxPlainPrograms bounds the driver's programs (each holds a dispatch
// table of the environment's functions); past it the table starts over.
const maxPlainPrograms = 256

// plainProgram is expr compiled in the plain environment, or nil.
func (d *Driver) plainProgram(expr string) celgo.Program {
	env, err := d.plainEnv()
	if err != nil {
		return nil
	}
	d.plain.mu.Lock()
	defer d.plain.mu.Unlock()
	if p, ok := d.plain.programs[expr]; ok {
		return p
	}
	checked, iss := env.Compile(expr)
	if iss != nil && iss.Err() != nil {
		return nil
	}
	p, err := env.Program(checked, celgo.InterruptCheckFrequency(celconfig.CheckFrequency))
	if err != nil {
		return nil
	}
	if len(d.plain.programs) >= maxPlainPrograms {
		clear(d.plain.programs)
	}
	d.plain.programs[expr] = p
	return p
}

// fastTestOf is m's fast test, or nil when the template's own compiler
// refuses the test or one of the variables it reads (varErrs: the
// variables that did not compile), or the plain environment does.
func (d *Driver) fastTestOf(m *membership, typeChecks func(expr string) bool, varErrs map[string]bool) *fastTest {
	names := []string{"params"}
	for n := range m.uses {
		names = append(names, n)
	}
	sort.Strings(names[1:])
	for _, n := range names {
		if varErrs[n] {
			return nil
		}
	}
	if !typeChecks(m.helperExpression()) {
		return nil
	}
	f := &fastTest{names: names, byConstraint: map[*unstructured.Unstructured]*keptVariables{}}
	if f.test = d.plainProgram(m.helperExpression()); f.test == nil {
		return nil
	}
	for _, n := range names {
		src := m.uses[n]
		if n == "params" {
			src = gatekeeperParamsExpression
		}
		p := d.plainProgram(src)
		if p == nil {
			return nil
		}
		f.vars = append(f.vars, p)
	}
	return f
}

// holds is the test's answer on arg for the Constraint c; ok is false
// when the composited test must answer instead.
func (f *fastTest) holds(ctx context.Context, c *unstructured.Unstructured, arg string) (holds, ok bool) {
	kept := f.variablesOf(c)
	if kept.cost > celconfig.PerCallLimit {
		return false, false
	}
	activation := map[string]any{"object": map[string]any{"arg": arg}, "params": c.Object, "variables": kept.values}
	out, details, err := f.test.ContextEval(ctx, activation)
	if err != nil || details == nil || details.ActualCost() == nil {
		return false, false
	}
	// Each program's own limit is the per-call one, so the sum cannot
	// overflow.
	if *details.ActualCost()+kept.cost > celconfig.PerCallLimit {
		return false, false
	}
	b, isBool := out.(celtypes.Bool)
	if !isBool {
		return false, false
	}
	return bool(b), true
}

// variablesOf computes the test's variables for c once: lazily, as the
// composition does, so that a variable that reads another finds its
// value, then every one of them.
func (f *fastTest) variablesOf(c *unstructured.Unstructured) *keptVariables {
	f.mu.RLock()
	kept, ok := f.byConstraint[c]
	f.mu.RUnlock()
	if ok {
		return kept
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if kept, ok := f.byConstraint[c]; ok {
		return kept
	}
	return f.keepVariables(c)
}

// keepVariables computes and keeps c's values of the test's variables;
// f.mu is held.
func (f *fastTest) keepVariables(c *unstructured.Unstructured) *keptVariables {
	kept := &keptVariables{}
	vars := lazy.NewMapValue(celtypes.NewObjectType("variables"))
	activation := map[string]any{"params": c.Object, "variables": vars}
	for i, name := range f.names {
		prog := f.vars[i]
		vars.Append(name, func(*lazy.MapValue) ref.Val {
			// Not the request's context: the values are kept, and a
			// deadline must not be kept as the variable's error.
			v, details, err := prog.ContextEval(context.Background(), activation)
			if details != nil && details.ActualCost() != nil {
				kept.cost += *details.ActualCost()
			}
			if err != nil {
				return celtypes.WrapErr(err)
			}
			return v
		})
	}
	values := make(map[string]any, len(f.names))
	for _, name := range f.names {
		values[name] = vars.Get(celtypes.String(name))
	}
	kept.values = celtypes.NewStringInterfaceMap(celtypes.DefaultTypeAdapter, values)
	if len(f.byConstraint) >= maxKeptConstraints {
		clear(f.byConstraint)
	}
	f.byConstraint[c] = kept
	return kept
}
