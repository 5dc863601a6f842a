package server

import (
	"context"
	"errors"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

func TestKubeBinder(t *testing.T) {
	podsGR := schema.GroupResource{Resource: "pods"}
	tests := []struct {
		name     string
		pod      *v1.Pod // in the fake cluster
		bindErr  error   // answered to the binding create
		uid      string
		wantErr  bool
		conflict bool // the returned error is still a Conflict
	}{
		{name: "bound", pod: testPod("ns", "p"), uid: "uid-p"},
		{name: "forbidden", pod: testPod("ns", "p"), uid: "uid-p", bindErr: apierrors.NewForbidden(podsGR, "p", errors.New("no")), wantErr: true},
		{name: "conflict, already bound here with this uid", pod: boundPod("n1", "uid-p"), uid: "uid-p", bindErr: apierrors.NewConflict(podsGR, "p", errors.New("already assigned"))},
		{name: "conflict, already bound here, no uid given", pod: boundPod("n1", "uid-p"), bindErr: apierrors.NewConflict(podsGR, "p", errors.New("already assigned"))},
		{name: "conflict, bound elsewhere", pod: boundPod("n2", "uid-p"), uid: "uid-p", bindErr: apierrors.NewConflict(podsGR, "p", errors.New("already assigned")), wantErr: true, conflict: true},
		{name: "conflict, other uid", pod: boundPod("n1", "uid-other"), uid: "uid-p", bindErr: apierrors.NewConflict(podsGR, "p", errors.New("precondition")), wantErr: true, conflict: true},
		{name: "conflict, pod gone", uid: "uid-p", bindErr: apierrors.NewConflict(podsGR, "p", errors.New("x")), wantErr: true, conflict: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var objs []runtime.Object
			if tc.pod != nil {
				objs = append(objs, tc.pod)
			}
			client := fake.NewClientset(objs...)
			var got *v1.Binding
			client.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
				if a.GetSubresource() != "binding" {
					return false, nil, nil
				}
				got = a.(k8stesting.CreateAction).GetObject().(*v1.Binding)
				return true, nil, tc.bindErr
			})
			b := NewKubeBinder(client, time.Second)
			ctx := context.Background()
			err := b.Bind(ctx, "ns", "p", types.UID(tc.uid), "n1")
			if (err != nil) != tc.wantErr {
				t.Fatalf("Bind: %v", err)
			}
			if tc.conflict && !apierrors.IsConflict(err) {
				t.Errorf("error lost its Conflict reason: %v", err)
			}
			if got == nil {
				t.Fatal("no binding created")
			}
			if got.Name != "p" || got.Namespace != "ns" || string(got.UID) != tc.uid ||
				got.Target.Kind != "Node" || got.Target.Name != "n1" {
				t.Errorf("binding %+v", got)
			}
		})
	}
}

func boundPod(node, uid string) *v1.Pod {
	p := testPod("ns", "p")
	p.UID = types.UID(uid)
	p.Spec.NodeName = node
	return p
}

func TestKubeBinderGetPod(t *testing.T) {
	client := fake.NewClientset(testPod("ns", "p"))
	b := NewKubeBinder(client, 0)
	p, err := b.GetPod(context.Background(), "ns", "p")
	if err != nil || p.Name != "p" || p.UID != "uid-p" {
		t.Fatalf("GetPod: %v %v", p, err)
	}
	if _, err := b.GetPod(context.Background(), "ns", "nope"); !apierrors.IsNotFound(err) {
		t.Fatalf("GetPod of a missing pod: %v", err)
	}
}
