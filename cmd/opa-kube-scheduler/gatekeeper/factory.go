package gatekeeper

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/source"
)

// New is the plugin factory (app.WithPlugin(Name, New)). kube-scheduler
// calls it once per profile that enables the plugin, with a context that
// lasts the process: the profile's engine and sources run until then.
func New(ctx context.Context, obj runtime.Object, h fwk.Handle) (fwk.Plugin, error) {
	args, err := decodeArgs(obj)
	if err != nil {
		return nil, err
	}
	profile := h.ProfileName()
	logger := klog.FromContext(ctx).WithValues("plugin", Name, "profile", profile)
	log := slog.New(logr.ToSlogHandler(logger))
	engine, err := opa.New(ctx, opa.Options{EnforcementPoint: args.EnforcementPoint, Logger: log.With("component", "engine"),
		AllowNetworkBuiltins: args.AllowNetworkBuiltins, MemoEntries: args.MemoMaxResults, MemoBytes: args.MemoMaxBytes,
		DisableK8sNativeValidation:              args.EnableK8sNativeValidation != nil && !*args.EnableK8sNativeValidation,
		DefaultK8sNativeValidationFailurePolicy: args.DefaultK8sNativeValidationFailurePolicy})
	if err != nil {
		return nil, fmt.Errorf("%s: start the policy engine: %w", Name, err)
	}
	go func() {
		<-ctx.Done()
		engine.Close(context.Background())
	}()
	ready, err := startSources(ctx, h, args, engine, log)
	if err != nil {
		engine.Close(context.Background())
		return nil, err
	}
	metrics, err := newProfileMetrics(profile, engine)
	if err != nil {
		engine.Close(context.Background())
		return nil, fmt.Errorf("%s: register the metrics of profile %s: %w", Name, profile, err)
	}
	pl := &Plugin{profile: profile, engine: engine, pods: opa.NewPodDecoder(), ready: ready, metrics: metrics, nodeMessages: args.NodeMessages}
	pl.requeue = newRequeuer(h, engine, ready, pl.metrics)
	_, _ = h.SharedInformerFactory().Core().V1().Namespaces().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { pl.namespaceEvent(obj) },
		UpdateFunc: func(_, obj any) { pl.namespaceEvent(obj) },
	})
	go pl.requeue.run(klog.NewContext(ctx, logger))
	logger.Info("policy engine started", "enforcementPoint", args.EnforcementPoint, "policyDir", args.PolicyDir,
		"clusterPolicies", *args.ClusterPolicies, "syncKinds", strings.Join(args.SyncKinds, ","))
	return pl, nil
}

func (pl *Plugin) namespaceEvent(obj any) {
	if ns, ok := obj.(*corev1.Namespace); ok {
		pl.requeue.namespaceChanged(ns.Name)
	}
}

// startSources keeps the engine in sync: Nodes and Namespaces from the
// scheduler's own informers, the cluster's policies and extra kinds
// through the cluster source, a folder when given. The returned check is
// true once every source has applied its first sync, and stays true: a
// later lag (a burst of Node updates being applied) is not a reason to
// stop scheduling.
func startSources(ctx context.Context, h fwk.Handle, args Args, engine *opa.Engine, log *slog.Logger) (func() (bool, string), error) {
	var checks []func() (bool, string)
	if args.PolicyDir != "" {
		dir := source.NewDir(args.PolicyDir, engine, source.DirOptions{Interval: args.PolicyPollInterval.Duration, Logger: log.With("component", "policy-dir")})
		if err := dir.Sync(ctx); err != nil {
			return nil, fmt.Errorf("%s: policyDir: %w", Name, err)
		}
		go dir.Run(ctx)
		checks = append(checks, dir.Ready)
	}
	extra, _ := source.ParseKinds(args.SyncKinds) // validated with the args
	factory := h.SharedInformerFactory()
	cluster, err := source.NewCluster(engine, source.ClusterOptions{
		Config:                 h.KubeConfig(),
		ExtraKinds:             extra,
		IgnoreGatekeeperConfig: args.IgnoreGatekeeperConfig,
		InventoryOnly:          !*args.ClusterPolicies,
		SharedInventory: []source.SharedInformer{
			{Resource: schema.GroupVersionResource{Version: "v1", Resource: "nodes"}, Kind: corev1.SchemeGroupVersion.WithKind("Node"), Informer: factory.Core().V1().Nodes().Informer()},
			{Resource: schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}, Kind: corev1.SchemeGroupVersion.WithKind("Namespace"), Informer: factory.Core().V1().Namespaces().Informer()},
		},
		Events: eventsFor(h),
		Logger: log.With("component", "cluster"),
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", Name, err)
	}
	go cluster.Run(ctx)
	checks = append(checks, cluster.Ready)
	return latchedReady(checks), nil
}

// latchedReady is true once all checks are, and from then on.
func latchedReady(checks []func() (bool, string)) func() (bool, string) {
	var ready atomic.Bool
	return func() (bool, string) {
		if ready.Load() {
			return true, ""
		}
		var waiting []string
		for _, c := range checks {
			if ok, why := c(); !ok {
				waiting = append(waiting, why)
			}
		}
		if len(waiting) > 0 {
			return false, strings.Join(waiting, "; ")
		}
		ready.Store(true)
		return true, ""
	}
}
