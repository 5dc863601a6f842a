package gatekeeper

import (
	"fmt"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

type capturedEvents []string

func (c *capturedEvents) Eventf(regarding, related runtime.Object, eventtype, reason, action, note string, args ...any) {
	*c = append(*c, fmt.Sprintf("%s %s %s %s: %s", regarding.(metav1.Object).GetName(), eventtype, reason, action, fmt.Sprintf(note, args...)))
}

// TestEventsRecorder: the cluster source's events reach kube-scheduler's
// recorder with their type, reason and message (a message with % in it
// written as it is).
func TestEventsRecorder(t *testing.T) {
	var got capturedEvents
	r := eventsRecorder{to: &got}
	obj := &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "k8sbroken"}}
	r.Event(obj, v1.EventTypeWarning, "Refused", "compile: 100% broken")
	r.Eventf(obj, v1.EventTypeNormal, "Accepted", "version %d in force", 3)
	want := capturedEvents{
		"k8sbroken Warning Refused Sync: compile: 100% broken",
		"k8sbroken Normal Accepted Sync: version 3 in force",
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("events %q, want %q", got, want)
	}
}
