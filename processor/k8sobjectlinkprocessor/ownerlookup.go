package k8sobjectlinkprocessor

import (
	"context"
	"fmt"
	"sync"
	"time"

	"go.opentelemetry.io/collector/component/componentstatus"
	"go.uber.org/zap"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/metadata"

	"github.com/kubetrail/kubetrail/internal/model"
)

// lookupFailedLogEvery spaces the warning that owner look-ups fail: once a minute while the
// apiserver does not answer, with the count of failures in between.
const lookupFailedLogEvery = time.Minute

// lookupResult is what the apiserver said about an object's controlling owner.
type lookupResult uint8

const (
	// lookupUnknown: the object is gone, was recreated under a new UID, or the call failed.
	lookupUnknown lookupResult = iota
	// lookupRoot: the object exists and has no controlling owner.
	lookupRoot
	// lookupOwner: the object exists and names its controlling owner.
	lookupOwner
)

// ownerLookup asks the apiserver, metadata only (PartialObjectMetadata: no spec, no status, a
// few hundred bytes per answer), for an object's controlling ownerReference. Answers, including
// "unknown", are cached for a TTL so that a stream of spans about one object costs one GET.
type ownerLookup struct {
	client metadata.Interface
	// cluster is the only cluster whose objects this client may be asked about: its apiserver
	// knows nothing of other clusters, and a namesake object there would give a wrong owner.
	cluster string
	ttl     time.Duration
	timeout time.Duration
	now     func() time.Time

	// resources, when not nil, are the only resources looked up (owner_lookup.resources).
	resources map[schema.GroupResource]bool

	mu    sync.Mutex
	cache map[model.Key]cachedLookup
	// forbidden holds, per resource the apiserver answered 403 for, that answer and until when
	// no object of the resource is asked about again.
	forbidden map[schema.GroupResource]forbiddenResource
}

type forbiddenResource struct {
	err   error
	until time.Time
}

type cachedLookup struct {
	result  lookupResult
	owner   model.Owner
	expires time.Time
}

// maxLookupCache bounds the look-up cache; when full, expired answers are dropped first and
// then the whole cache, which only costs repeated GETs.
const maxLookupCache = 100_000

// newOwnerLookup makes the client's look-ups; resources are owner_lookup.resources ("pods",
// "replicasets.apps"; empty: every resource).
func newOwnerLookup(client metadata.Interface, cluster string, ttl, timeout time.Duration, now func() time.Time, resources ...string) *ownerLookup {
	l := &ownerLookup{client: client, cluster: cluster, ttl: ttl, timeout: timeout, now: now,
		cache: make(map[model.Key]cachedLookup), forbidden: make(map[schema.GroupResource]forbiddenResource)}
	if len(resources) > 0 {
		l.resources = make(map[schema.GroupResource]bool, len(resources))
		for _, r := range resources {
			l.resources[schema.ParseGroupResource(r)] = true
		}
	}
	return l
}

// serves reports whether the object may be looked up with this client: it is of the client's
// cluster and of a resource the client may ask about.
func (l *ownerLookup) serves(o model.Object) bool {
	return o.Cluster == l.cluster && (l.resources == nil || l.resources[schema.GroupResource{Group: o.Group, Resource: o.Resource}])
}

// listed reports whether owner_lookup.resources names the resource (false when it is empty).
func (l *ownerLookup) listed(gr schema.GroupResource) bool { return l.resources[gr] }

// lookup returns the object's controlling owner as the apiserver knows it. An object of another
// cluster is never sent to the apiserver: it is unknown here.
func (l *ownerLookup) lookup(ctx context.Context, o model.Object) (lookupResult, model.Owner, error) {
	if !l.serves(o) {
		return lookupUnknown, model.Owner{}, nil
	}
	key := o.Key()
	now := l.now()
	gr := schema.GroupResource{Group: o.Group, Resource: o.Resource}
	l.mu.Lock()
	if c, ok := l.cache[key]; ok && now.Before(c.expires) {
		l.mu.Unlock()
		return c.result, c.owner, nil
	}
	// A resource the apiserver forbade is not asked about again before cache_ttl: the answer
	// would be the same 403.
	if f, ok := l.forbidden[gr]; ok && now.Before(f.until) {
		l.mu.Unlock()
		return lookupUnknown, model.Owner{}, f.err
	}
	l.mu.Unlock()

	result, owner, err := l.get(ctx, o)
	l.mu.Lock()
	if apierrors.IsForbidden(err) {
		l.forbidden[gr] = forbiddenResource{err: err, until: now.Add(l.ttl)}
	}
	if len(l.cache) >= maxLookupCache {
		for k, c := range l.cache {
			if !now.Before(c.expires) {
				delete(l.cache, k)
			}
		}
		if len(l.cache) >= maxLookupCache {
			clear(l.cache)
		}
	}
	l.cache[key] = cachedLookup{result: result, owner: owner, expires: now.Add(l.ttl)}
	l.mu.Unlock()
	return result, owner, err
}

func (l *ownerLookup) get(ctx context.Context, o model.Object) (lookupResult, model.Owner, error) {
	if o.Resource == "" || o.Name == "" || o.Version == "" {
		return lookupUnknown, model.Owner{}, nil
	}
	// Only our own timeout bounds the GET: a caller's cancellation (a webhook request the
	// apiserver gave up on) would otherwise be cached as "unknown" for the whole TTL.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.timeout)
	defer cancel()
	gvr := schema.GroupVersionResource{Group: o.Group, Version: o.Version, Resource: o.Resource}
	var ri metadata.ResourceInterface
	if o.Namespace != "" {
		ri = l.client.Resource(gvr).Namespace(o.Namespace)
	} else {
		ri = l.client.Resource(gvr)
	}
	m, err := ri.Get(ctx, o.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return lookupUnknown, model.Owner{}, nil
	}
	if err != nil {
		return lookupUnknown, model.Owner{}, fmt.Errorf("owner look-up of %s: %w", o.Key(), err)
	}
	// The name now belongs to another object: the owner of the one we want is not this one's.
	if o.UID != "" && string(m.UID) != o.UID {
		return lookupUnknown, model.Owner{}, nil
	}
	for _, ref := range m.OwnerReferences {
		if ref.Controller != nil && *ref.Controller {
			return lookupOwner, model.Owner{APIVersion: ref.APIVersion, Kind: ref.Kind, Name: ref.Name, UID: string(ref.UID)}, nil
		}
	}
	return lookupRoot, model.Owner{}, nil
}

// The processor is the resolver's forbiddenReporter: what a batch's look-ups ran into is
// reported once, not per batch.

// lookupFailed warns, at most once per lookupFailedLogEvery, that owner look-ups fail (an
// apiserver unreachable, slow past owner_lookup.timeout, or answering 5xx): the objects they were
// for are placed from spans and relations only, as roots when nothing else names their owner.
func (p *objectLinkProcessor) lookupFailed(err error) {
	suppressed, ok := p.lookupLogs.Allow("lookup", p.clock.Now())
	if !ok {
		return
	}
	p.logger.Warn("Owner look-ups are failing; objects whose owner no span or relation names are placed as roots until the apiserver answers",
		zap.Int("similar_errors_not_logged", suppressed), zap.Error(err))
}

// lookupForbidden reports a forbidden owner look-up; spans keep flowing (as roots or through
// relations). A resource owner_lookup.resources lists is a configuration the RBAC contradicts,
// which will not fix itself: an error and a permanent status, once. With every resource looked
// up (no list), RBAC that grants some resources and not others is the normal case: a warning
// once per resource, naming it.
func (p *objectLinkProcessor) lookupForbidden(gr schema.GroupResource, listed bool, err error) {
	if p.host == nil {
		return
	}
	if _, seen := p.forbiddenResources.LoadOrStore(gr, true); seen {
		return
	}
	if listed {
		p.logger.Error("Owner look-ups of a resource owner_lookup.resources lists are forbidden; grant get on it or remove it from the list",
			zap.String("resource", gr.String()), zap.Error(err))
		p.forbiddenOnce.Do(func() {
			componentstatus.ReportStatus(p.host, componentstatus.NewPermanentErrorEvent(err))
		})
		return
	}
	p.logger.Warn("Owner look-ups of this resource are forbidden: its objects are placed from spans and relations only; grant get on it, or list the resources the RBAC grants in owner_lookup.resources",
		zap.String("resource", gr.String()), zap.Error(err))
}
