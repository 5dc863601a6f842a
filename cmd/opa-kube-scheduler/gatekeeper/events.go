package gatekeeper

import (
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/record"
	fwk "k8s.io/kube-scheduler/framework"
)

// eventsRecorder hands the cluster source's events (a Warning on each
// ConstraintTemplate and Constraint the engine refuses, a Normal when it
// accepts it again) to kube-scheduler's own recorder, which speaks the
// events.k8s.io API: `kubectl describe` shows them as it does for the
// extender.
type eventsRecorder struct {
	to interface {
		Eventf(regarding, related runtime.Object, eventtype, reason, action, note string, args ...any)
	}
}

var _ record.EventRecorder = eventsRecorder{}

// eventsFor is the handle's recorder as a record.EventRecorder, or nil.
func eventsFor(h fwk.Handle) record.EventRecorder {
	if r := h.EventRecorder(); r != nil {
		return eventsRecorder{to: r}
	}
	return nil
}

func (e eventsRecorder) Event(object runtime.Object, eventtype, reason, message string) {
	e.to.Eventf(object, nil, eventtype, reason, "Sync", "%s", message)
}

func (e eventsRecorder) Eventf(object runtime.Object, eventtype, reason, messageFmt string, args ...any) {
	e.to.Eventf(object, nil, eventtype, reason, "Sync", "%s", fmt.Sprintf(messageFmt, args...))
}

func (e eventsRecorder) AnnotatedEventf(object runtime.Object, _ map[string]string, eventtype, reason, messageFmt string, args ...any) {
	e.Eventf(object, eventtype, reason, messageFmt, args...)
}
