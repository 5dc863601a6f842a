package source

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa"
)

var (
	templateGVR = schema.GroupVersionResource{Group: opa.TemplateGroup, Version: "v1", Resource: "constrainttemplates"}
	nodeGVR     = schema.GroupVersionResource{Version: "v1", Resource: "nodes"}
	nsGVR       = schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}
	configGVR   = schema.GroupVersionResource{Group: "config.gatekeeper.sh", Version: "v1alpha1", Resource: "configs"}
)

// ClusterOptions configure a Cluster source.
type ClusterOptions struct {
	// Config reaches the API server.
	Config *rest.Config
	// ExtraKinds are inventory kinds to sync besides Nodes and Namespaces.
	ExtraKinds []schema.GroupVersionKind
	// IgnoreGatekeeperConfig turns off reading Gatekeeper's Config
	// (config.gatekeeper.sh, spec.sync.syncOnly) for more inventory kinds.
	IgnoreGatekeeperConfig bool
	// BatchWindow is how long changes gather before one Apply (default
	// 20ms): a burst of node updates costs one store commit, and a
	// change still reaches answers well within a second.
	BatchWindow time.Duration
	// ConstraintGrace is how long an informer for a template's constraints
	// may fail to list (its CRD missing: Gatekeeper not running) before
	// readiness stops waiting for it (default 30s).
	ConstraintGrace time.Duration
	// Events, when set, records a Warning event on every ConstraintTemplate
	// and Constraint the engine refuses (kubectl describe shows why), once
	// per distinct error, and a Normal event when a refused one is
	// accepted again.
	Events record.EventRecorder
	// SharedInventory are inventory kinds whose objects come from
	// informers the caller owns and starts (the plugin build hands in
	// kube-scheduler's own Node and Namespace informers): the source adds
	// its handlers to them and starts no watch of its own for those kinds,
	// so the process watches and caches each object once.
	SharedInventory []SharedInformer
	// InventoryOnly syncs the inventory only, no ConstraintTemplates or
	// Constraints: the policies come from elsewhere (a folder).
	InventoryOnly bool
	Logger        *slog.Logger
}

// ParseKinds parses inventory kinds written group/version/Kind, or
// v1/Kind for the core group.
func ParseKinds(kinds []string) ([]schema.GroupVersionKind, error) {
	var out []schema.GroupVersionKind
	for _, k := range kinds {
		parts := strings.Split(k, "/")
		switch len(parts) {
		case 2:
			out = append(out, schema.GroupVersionKind{Version: parts[0], Kind: parts[1]})
		case 3:
			out = append(out, schema.GroupVersionKind{Group: parts[0], Version: parts[1], Kind: parts[2]})
		default:
			return nil, fmt.Errorf("kind %q: want group/version/Kind or v1/Kind", k)
		}
	}
	return out, nil
}

// SharedInformer is an informer of typed objects (client-go's
// SharedInformerFactory) whose objects feed the inventory.
type SharedInformer struct {
	Resource schema.GroupVersionResource
	Kind     schema.GroupVersionKind
	Informer cache.SharedIndexInformer
}

// Cluster keeps the engine in sync with a cluster: ConstraintTemplates,
// the constraints of every template's kind (informers start and stop as
// templates come and go), Nodes, Namespaces and further inventory kinds.
// When the API server goes away the engine keeps the last synced state;
// Ready reports the staleness and the informers catch up when it is back.
type Cluster struct {
	opts    ClusterOptions
	applier Applier
	dyn     dynamic.Interface
	disc    discovery.DiscoveryInterface
	mapper  *restmapper.DeferredDiscoveryRESTMapper
	log     *slog.Logger

	mu        sync.Mutex
	informers map[schema.GroupVersionResource]*watched
	pending   map[string]opa.Change
	order     []string
	// applying counts the batches taken from pending whose Apply has not
	// returned: they are in no informer's queue and not yet in the engine.
	applying int
	// firstApplied: the first lists were all in the engine once; from
	// then on, changes being applied do not make the source unready.
	firstApplied bool
	wake         chan struct{}
	ctx          context.Context
	// health of the connection to the API server
	connected    bool
	lastContact  time.Time
	lastErr      string
	disconnected time.Time
	syncKinds    map[schema.GroupVersionResource]bool // from Gatekeeper's Config
	// refused holds the last error reported per policy object (applyLoop
	// only), so that each distinct refusal makes one event.
	refused map[opa.ObjectRef]string
}

type watched struct {
	gvr  schema.GroupVersionResource
	role string // "templates", "constraints", "inventory", "config"
	kind string // template kind, for constraints
	// typed is the kind of a shared informer's typed objects (zero for
	// the source's own, unstructured informers).
	typed schema.GroupVersionKind
	inf   cache.SharedIndexInformer
	// reg is this source's handler on inf: synced once the handler has
	// been given every object of the initial list (inf.HasSynced is true
	// as soon as inf's store holds them, before the handlers ran).
	reg     cache.ResourceEventHandlerRegistration
	cancel  context.CancelFunc
	started time.Time
	lastErr string
}

// NewCluster prepares a cluster source; Run starts it.
func NewCluster(applier Applier, opts ClusterOptions) (*Cluster, error) {
	if opts.Config == nil {
		return nil, fmt.Errorf("cluster source: no API server configuration")
	}
	if opts.BatchWindow <= 0 {
		opts.BatchWindow = 20 * time.Millisecond
	}
	if opts.ConstraintGrace <= 0 {
		opts.ConstraintGrace = 30 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	dyn, err := dynamic.NewForConfig(opts.Config)
	if err != nil {
		return nil, fmt.Errorf("cluster source: %w", err)
	}
	disc, err := discovery.NewDiscoveryClientForConfig(opts.Config)
	if err != nil {
		return nil, fmt.Errorf("cluster source: %w", err)
	}
	return &Cluster{
		opts: opts, applier: applier, dyn: dyn, disc: disc,
		mapper:    restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disc)),
		log:       opts.Logger,
		informers: map[schema.GroupVersionResource]*watched{},
		pending:   map[string]opa.Change{},
		wake:      make(chan struct{}, 1),
		connected: true,
		syncKinds: map[schema.GroupVersionResource]bool{},
	}, nil
}

// Run syncs until ctx ends.
func (c *Cluster) Run(ctx context.Context) {
	c.mu.Lock()
	c.ctx = ctx
	c.mu.Unlock()
	if !c.opts.InventoryOnly {
		c.watch(templateGVR, "templates", "")
	}
	for _, si := range c.opts.SharedInventory {
		c.share(si)
	}
	c.watch(nodeGVR, "inventory", "")
	c.watch(nsGVR, "inventory", "")
	for _, gvk := range c.opts.ExtraKinds {
		gvr, err := c.resource(gvk)
		if err != nil {
			c.log.Error("inventory kind not served by the API server; not synced", "kind", gvk.String(), "err", err)
			continue
		}
		c.watch(gvr, "inventory", "")
	}
	if !c.opts.IgnoreGatekeeperConfig {
		c.watchGatekeeperConfig()
	}
	go c.probe(ctx)
	c.applyLoop(ctx)
}

func (c *Cluster) resource(gvk schema.GroupVersionKind) (schema.GroupVersionResource, error) {
	m, err := c.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		c.mapper.Reset()
		if m, err = c.mapper.RESTMapping(gvk.GroupKind(), gvk.Version); err != nil {
			return schema.GroupVersionResource{}, err
		}
	}
	return m.Resource, nil
}

// watchGatekeeperConfig follows Gatekeeper's Config when its CRD is served.
func (c *Cluster) watchGatekeeperConfig() {
	if _, err := c.disc.ServerResourcesForGroupVersion(configGVR.GroupVersion().String()); err != nil {
		c.log.Info("Gatekeeper's Config is not served; inventory is Nodes, Namespaces and --sync-kind", "err", err)
		return
	}
	c.watch(configGVR, "config", "")
}

// watch starts an informer for gvr unless one runs.
func (c *Cluster) watch(gvr schema.GroupVersionResource, role, kind string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.informers[gvr]; ok || c.ctx == nil {
		return
	}
	ctx, cancel := context.WithCancel(c.ctx)
	var inf cache.SharedIndexInformer
	if role == "inventory" {
		// The engine is the inventory's only cache: the informer keeps a
		// stub per object (keptObject), not a second copy.
		lw := &handingOver{res: c.dyn.Resource(gvr), hand: c.handListed}
		inf = cache.NewSharedIndexInformer(lw, &unstructured.Unstructured{}, 0, cache.Indexers{})
		_ = inf.SetTransform(handOver)
	} else {
		inf = dynamicinformer.NewFilteredDynamicInformer(c.dyn, gvr, "", 0, cache.Indexers{}, nil).Informer()
	}
	w := &watched{gvr: gvr, role: role, kind: kind, inf: inf, cancel: cancel, started: time.Now()}
	_ = inf.SetWatchErrorHandler(func(_ *cache.Reflector, err error) {
		c.mu.Lock()
		w.lastErr = err.Error()
		c.mu.Unlock()
		if apierrors.IsNotFound(err) {
			c.log.Debug("resource not served yet", "resource", gvr.String())
			return
		}
		c.log.Warn("watch failed; serving the last synced state", "resource", gvr.String(), "err", err)
	})
	w.reg, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { c.onUpsert(w, obj) },
		UpdateFunc: func(_, obj any) { c.onUpsert(w, obj) },
		DeleteFunc: func(obj any) { c.onDelete(w, obj) },
	})
	c.informers[gvr] = w
	go inf.Run(ctx.Done())
	c.log.Info("watching", "resource", gvr.String(), "role", role)
}

// share feeds the inventory from an informer the caller runs.
func (c *Cluster) share(si SharedInformer) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.informers[si.Resource]; ok {
		return
	}
	w := &watched{gvr: si.Resource, role: "inventory", typed: si.Kind, inf: si.Informer, cancel: func() {}, started: time.Now()}
	w.reg, _ = si.Informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { c.onUpsert(w, obj) },
		UpdateFunc: func(_, obj any) { c.onUpsert(w, obj) },
		DeleteFunc: func(obj any) { c.onDelete(w, obj) },
	})
	c.informers[si.Resource] = w
	c.log.Info("sharing the caller's informer", "resource", si.Resource.String(), "role", "inventory")
}

// unwatch stops an informer and removes what it had put in the engine.
func (c *Cluster) unwatch(gvr schema.GroupVersionResource) {
	c.mu.Lock()
	w, ok := c.informers[gvr]
	if ok {
		delete(c.informers, gvr)
	}
	c.mu.Unlock()
	if !ok {
		return
	}
	w.cancel()
	for _, obj := range w.inf.GetStore().List() {
		c.onDelete(w, obj)
	}
	c.log.Info("stopped watching", "resource", gvr.String())
}

func (c *Cluster) onUpsert(w *watched, obj any) {
	u, ok := objectOf(obj)
	if !ok && !w.typed.Empty() {
		u, ok = typedObject(obj, w.typed)
	}
	if !ok {
		return
	}
	c.contact()
	switch w.role {
	case "config":
		if u.GetName() == gatekeeperConfigName {
			c.onConfig(u)
		}
		return
	case "templates":
		if kind, _, _ := unstructured.NestedString(u.Object, "spec", "crd", "spec", "names", "kind"); kind != "" {
			c.watch(schema.GroupVersionResource{Group: opa.ConstraintGroup, Version: "v1beta1", Resource: strings.ToLower(kind)}, "constraints", kind)
		}
	}
	c.enqueue(opa.Change{Object: u})
}

func (c *Cluster) onDelete(w *watched, obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	if k, ok := obj.(*keptObject); ok {
		c.enqueue(opa.Change{Delete: &k.ref})
		return
	}
	u, ok := obj.(*unstructured.Unstructured)
	if !ok && !w.typed.Empty() {
		if m, err := meta.Accessor(obj); err == nil {
			c.enqueue(opa.Change{Delete: &opa.ObjectRef{GroupVersionKind: w.typed, Namespace: m.GetNamespace(), Name: m.GetName()}})
		}
		return
	}
	if !ok {
		return
	}
	switch w.role {
	case "config":
		if u.GetName() == gatekeeperConfigName {
			c.onConfig(nil)
		}
		return
	case "templates":
		if kind, _, _ := unstructured.NestedString(u.Object, "spec", "crd", "spec", "names", "kind"); kind != "" {
			defer c.unwatch(schema.GroupVersionResource{Group: opa.ConstraintGroup, Version: "v1beta1", Resource: strings.ToLower(kind)})
		}
	}
	c.enqueue(opa.Change{Delete: &opa.ObjectRef{GroupVersionKind: u.GroupVersionKind(), Namespace: u.GetNamespace(), Name: u.GetName()}})
}

// gatekeeperConfigName is the one Config Gatekeeper reads (in its own
// namespace, gatekeeper-system by default; any namespace is accepted here,
// as the service does not know Gatekeeper's).
const gatekeeperConfigName = "config"

// onConfig follows spec.sync.syncOnly of Gatekeeper's Config: the kinds
// Gatekeeper replicates into its inventory are replicated here too.
func (c *Cluster) onConfig(u *unstructured.Unstructured) {
	want := map[schema.GroupVersionResource]bool{}
	if u != nil {
		raw, _, _ := unstructured.NestedFieldNoCopy(u.Object, "spec", "sync", "syncOnly")
		entries, _ := raw.([]any)
		for _, e := range entries {
			m, _ := e.(map[string]any)
			gvk := schema.GroupVersionKind{Group: fmt.Sprint(m["group"]), Version: fmt.Sprint(m["version"]), Kind: fmt.Sprint(m["kind"])}
			if m["group"] == nil {
				gvk.Group = ""
			}
			gvr, err := c.resource(gvk)
			if err != nil {
				c.log.Warn("Gatekeeper Config names a kind the API server does not serve", "kind", gvk.String(), "err", err)
				continue
			}
			want[gvr] = true
		}
	}
	c.mu.Lock()
	old := c.syncKinds
	c.syncKinds = want
	c.mu.Unlock()
	for gvr := range want {
		c.watch(gvr, "inventory", "")
	}
	for gvr := range old {
		if !want[gvr] && gvr != nodeGVR && gvr != nsGVR && !c.extra(gvr) {
			c.unwatch(gvr)
		}
	}
}

func (c *Cluster) extra(gvr schema.GroupVersionResource) bool {
	for _, gvk := range c.opts.ExtraKinds {
		if r, err := c.resource(gvk); err == nil && r == gvr {
			return true
		}
	}
	return false
}

func changeKey(ch opa.Change) string {
	if ch.Object != nil {
		u := ch.Object
		return u.GroupVersionKind().GroupKind().String() + "/" + u.GetNamespace() + "/" + u.GetName()
	}
	d := ch.Delete
	return d.GroupVersionKind.GroupKind().String() + "/" + d.Namespace + "/" + d.Name
}

// maxPendingListed is how many changes may wait for the engine before an
// initial list reads its next page.
const maxPendingListed = listPage

// handListed queues an object of an inventory list, then waits while the
// engine has more than maxPendingListed changes to take.
func (c *Cluster) handListed(ctx context.Context, u *unstructured.Unstructured) {
	if u == nil {
		return
	}
	c.enqueue(opa.Change{Object: u})
	for {
		c.mu.Lock()
		n := len(c.pending)
		c.mu.Unlock()
		if n <= maxPendingListed || ctx.Err() != nil {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// enqueue keeps the newest change per object until the next batch.
func (c *Cluster) enqueue(ch opa.Change) {
	k := changeKey(ch)
	c.mu.Lock()
	if _, ok := c.pending[k]; !ok {
		c.order = append(c.order, k)
	}
	c.pending[k] = ch
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

func (c *Cluster) applyLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.wake:
		}
		// Let a burst gather.
		select {
		case <-ctx.Done():
			return
		case <-time.After(c.opts.BatchWindow):
		}
		c.mu.Lock()
		batch := make([]opa.Change, 0, len(c.order))
		for _, k := range c.order {
			batch = append(batch, c.pending[k])
		}
		c.pending = map[string]opa.Change{}
		c.order = nil
		if len(batch) == 0 {
			c.mu.Unlock()
			continue
		}
		c.applying++
		c.mu.Unlock()
		sortChanges(batch)
		errs := c.applier.Apply(ctx, batch)
		c.mu.Lock()
		c.applying--
		c.mu.Unlock()
		for _, err := range errs {
			c.log.Warn("cluster object refused; the previous version stays in force", "err", err)
		}
		c.recordRefusals(batch, errs)
	}
}

// recordRefusals turns the engine's refusals of policy objects into
// events on them, and a later acceptance into a Normal event.
func (c *Cluster) recordRefusals(batch []opa.Change, errs []*opa.ApplyError) {
	if c.opts.Events == nil {
		return
	}
	if c.refused == nil {
		c.refused = map[opa.ObjectRef]string{}
	}
	failed := map[opa.ObjectRef]error{}
	for _, e := range errs {
		failed[e.Ref] = e.Err
	}
	for _, ch := range batch {
		u := ch.Object
		if u == nil {
			continue
		}
		g := u.GroupVersionKind().Group
		if g != opa.TemplateGroup && g != opa.ConstraintGroup {
			continue
		}
		ref := opa.ObjectRef{GroupVersionKind: u.GroupVersionKind(), Namespace: u.GetNamespace(), Name: u.GetName()}
		err, bad := failed[ref]
		last, wasBad := c.refused[ref]
		switch {
		case bad && err.Error() != last:
			c.refused[ref] = err.Error()
			c.opts.Events.Eventf(u, "Warning", "Refused", "opa-scheduler-extender refused this %s; %s: %v", u.GetKind(), keepsWhat(g), err)
		case !bad && wasBad:
			delete(c.refused, ref)
			c.opts.Events.Eventf(u, "Normal", "Accepted", "opa-scheduler-extender accepted this %s", u.GetKind())
		}
	}
}

func keepsWhat(group string) string {
	if group == opa.TemplateGroup {
		return "its previous version stays in force (without one, its constraints are inactive)"
	}
	return "its previous version stays in force, if it had one"
}

// probe checks the API server every few seconds, so that staleness is
// reported even when no watch event would reveal it.
func (c *Cluster) probe(ctx context.Context) {
	t := time.NewTicker(3 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := c.disc.RESTClient().Get().AbsPath("/readyz").Do(pctx).Error()
		cancel()
		if err != nil {
			c.mu.Lock()
			if c.connected {
				c.disconnected = time.Now()
				c.log.Warn("API server unreachable; answering from the last synced state", "err", err)
			}
			c.connected = false
			c.lastErr = err.Error()
			c.mu.Unlock()
			continue
		}
		c.contact()
	}
}

func (c *Cluster) contact() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.connected {
		c.log.Info("API server reachable again", "down", time.Since(c.disconnected).Round(time.Second).String())
	}
	c.connected = true
	c.lastContact = time.Now()
}

// Ready is true once every informer has listed its objects and the
// resulting changes were applied. Constraint informers whose CRD is
// missing stop blocking readiness after ConstraintGrace. When ready but
// cut off from the API server, the note says since when.
func (c *Cluster) Ready() (bool, string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var waiting []string
	for _, w := range c.informers {
		if w.reg != nil && w.reg.HasSynced() {
			continue
		}
		if w.role == "constraints" && time.Since(w.started) > c.opts.ConstraintGrace {
			continue
		}
		what := w.gvr.Resource
		if w.gvr.Group != "" {
			what += "." + w.gvr.Group
		}
		if w.lastErr != "" {
			what += " (" + w.lastErr + ")"
		}
		waiting = append(waiting, what)
	}
	if c.ctx == nil {
		waiting = append(waiting, "cluster sync to start")
	}
	if len(waiting) > 0 {
		sort.Strings(waiting)
		return false, "cluster sync: " + strings.Join(waiting, ", ")
	}
	if !c.firstApplied {
		// Until every object of the first lists is in the engine: a batch
		// taken from pending is in no queue until its Apply returns.
		if len(c.pending) > 0 || c.applying > 0 {
			return false, "cluster sync: applying the first changes"
		}
		c.firstApplied = true // later changes wait their turn, ready
	}
	if !c.connected {
		return true, fmt.Sprintf("API server unreachable since %s: answering from the state synced then (%s)", c.disconnected.Format(time.RFC3339), c.lastErr)
	}
	return true, ""
}

// ClusterStatus describes the cluster source for /debug/policies.
type ClusterStatus struct {
	Connected   bool           `json:"connected"`
	LastContact time.Time      `json:"lastContact"`
	LastError   string         `json:"lastError,omitempty"`
	Informers   []InformerInfo `json:"informers"`
}

// InformerInfo is one watched resource.
type InformerInfo struct {
	Resource string `json:"resource"`
	Role     string `json:"role"`
	Synced   bool   `json:"synced"`
	Objects  int    `json:"objects"`
	Error    string `json:"error,omitempty"`
}

// Status lists the informers and the connection's health.
func (c *Cluster) Status() ClusterStatus {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := ClusterStatus{Connected: c.connected, LastContact: c.lastContact, LastError: c.lastErr}
	for gvr, w := range c.informers {
		s.Informers = append(s.Informers, InformerInfo{Resource: gvr.String(), Role: w.role, Synced: w.inf.HasSynced(), Objects: len(w.inf.GetStore().ListKeys()), Error: w.lastErr})
	}
	sort.Slice(s.Informers, func(i, j int) bool { return s.Informers[i].Resource < s.Informers[j].Resource })
	return s
}

// Connected reports whether the last probe reached the API server.
func (c *Cluster) Connected() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.connected
}
