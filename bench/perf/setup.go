package perf

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa"
)

// NewEngine starts an engine and loads the policies, then the inventory
// in batches of batch objects (all at once when batch <= 0).
func NewEngine(ctx context.Context, opts opa.Options, ps []Policy, inventory []*unstructured.Unstructured, batch int) (*opa.Engine, error) {
	e, err := opa.New(ctx, opts)
	if err != nil {
		return nil, err
	}
	if err := ApplyPolicies(ctx, e, ps); err != nil {
		e.Close(ctx)
		return nil, err
	}
	if err := ApplyObjects(ctx, e, inventory, batch); err != nil {
		e.Close(ctx)
		return nil, err
	}
	return e, nil
}

// Candidates are nodes 0..n-1 by name, as a nodeCacheCapable request
// names them.
func Candidates(n int) []opa.Candidate {
	out := make([]opa.Candidate, n)
	for i := range out {
		out[i].Name = NodeName(i)
	}
	return out
}

// ApplyPolicies loads the templates, then the constraints, into the
// engine; any refusal is an error.
func ApplyPolicies(ctx context.Context, e *opa.Engine, ps []Policy) error {
	var tmpls, cons []opa.Change
	for _, p := range ps {
		tmpls = append(tmpls, opa.Change{Object: p.Template.DeepCopy()})
		for _, c := range p.Constraints {
			cons = append(cons, opa.Change{Object: c.DeepCopy()})
		}
	}
	if errs := e.Apply(ctx, tmpls); len(errs) > 0 {
		return fmt.Errorf("engine refused templates: %w", joinApplyErrors(errs))
	}
	if errs := e.Apply(ctx, cons); len(errs) > 0 {
		return fmt.Errorf("engine refused constraints: %w", joinApplyErrors(errs))
	}
	st := e.Status()
	active := 0
	for _, c := range st.Constraints {
		if c.Active {
			active++
		}
	}
	if want := CountConstraints(ps); active != want {
		return fmt.Errorf("engine holds %d active constraints, want %d", active, want)
	}
	return nil
}

// ApplyObjects adds inventory objects (Nodes, Namespaces) to the engine in
// batches of batch objects (all at once when batch <= 0).
func ApplyObjects(ctx context.Context, e *opa.Engine, objs []*unstructured.Unstructured, batch int) error {
	if batch <= 0 {
		batch = len(objs)
	}
	for start := 0; start < len(objs); start += batch {
		end := min(start+batch, len(objs))
		changes := make([]opa.Change, 0, end-start)
		for _, o := range objs[start:end] {
			changes = append(changes, opa.Change{Object: o})
		}
		if errs := e.Apply(ctx, changes); len(errs) > 0 {
			return fmt.Errorf("engine refused inventory: %w", joinApplyErrors(errs))
		}
	}
	return nil
}

func joinApplyErrors(errs []*opa.ApplyError) error {
	out := make([]error, len(errs))
	for i, e := range errs {
		out[i] = e
	}
	return errors.Join(out...)
}

// DenyConstraints are the engine's constraints whose action is deny (the
// ones filter enforces), by "kind/name".
func DenyConstraints(e *opa.Engine) map[string]bool {
	out := map[string]bool{}
	for _, c := range e.Status().Constraints {
		if c.Active && c.Action == opa.Deny {
			out[c.Kind+"/"+c.Name] = true
		}
	}
	return out
}

// ActiveConstraints are the constraints in force at this enforcement
// point, whatever their action ("kind/name").
func ActiveConstraints(e *opa.Engine) map[string]bool {
	out := map[string]bool{}
	for _, c := range e.Status().Constraints {
		if c.Active && c.Action != "" {
			out[c.Kind+"/"+c.Name] = true
		}
	}
	return out
}

// ServerView is the pod as the server hands it to the engine: decoded into
// a v1.Pod (as the extender's wire type holds it) and converted back to
// unstructured content with apiVersion v1 and kind Pod. Give the peer this
// view so that both sides judge the same object.
func ServerView(podJSON []byte) (map[string]any, error) {
	var p corev1.Pod
	if err := json.Unmarshal(podJSON, &p); err != nil {
		return nil, err
	}
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&p)
	if err != nil {
		return nil, err
	}
	m["apiVersion"] = "v1"
	m["kind"] = "Pod"
	return m, nil
}

// SchedulerUserInfo is review.userInfo in the engine's placement reviews
// (opa.Options.UserInfo's default).
func SchedulerUserInfo() map[string]any {
	return map[string]any{"username": "system:kube-scheduler", "groups": []any{"system:authenticated"}}
}

// ProcStatus reads the memory lines of /proc/self/status, in KiB:
// VmRSS (resident now) and VmHWM (peak resident).
func ProcStatus() (rssKiB, hwmKiB int64, err error) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		for _, k := range []string{"VmRSS:", "VmHWM:"} {
			if !strings.HasPrefix(line, k) {
				continue
			}
			fields := strings.Fields(line[len(k):])
			if len(fields) == 0 {
				continue
			}
			v, err := strconv.ParseInt(fields[0], 10, 64)
			if err != nil {
				return 0, 0, fmt.Errorf("/proc/self/status %s: %w", k, err)
			}
			if k == "VmRSS:" {
				rssKiB = v
			} else {
				hwmKiB = v
			}
		}
	}
	if err := sc.Err(); err != nil {
		return 0, 0, err
	}
	if rssKiB == 0 {
		return 0, 0, errors.New("no VmRSS in /proc/self/status")
	}
	return rssKiB, hwmKiB, nil
}
