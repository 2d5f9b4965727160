package k8sconfig

import (
	"sync"
	"time"

	"k8s.io/client-go/discovery"

	"github.com/kubetrail/kubetrail/internal/model"
)

// DiscoveryMapper answers resource↔kind questions for CRDs and aggregated APIs from the
// apiserver's discovery documents. It refreshes at most once per minRefresh when asked about
// something it does not know, so a stream of unknown resources cannot hammer the apiserver.
type DiscoveryMapper struct {
	client     discovery.DiscoveryInterface
	minRefresh time.Duration
	now        func() time.Time

	mu          sync.RWMutex
	table       *model.TableMapper
	lastRefresh time.Time
}

// NewDiscoveryMapper returns a mapper backed by client.
func NewDiscoveryMapper(client discovery.DiscoveryInterface, minRefresh time.Duration) *DiscoveryMapper {
	return &DiscoveryMapper{client: client, minRefresh: minRefresh, now: time.Now, table: model.NewTableMapper(nil)}
}

// ByResource implements model.Mapper.
func (d *DiscoveryMapper) ByResource(group, resource string) (model.ResourceInfo, bool) {
	return d.lookup(func(t *model.TableMapper) (model.ResourceInfo, bool) { return t.ByResource(group, resource) })
}

// ByKind implements model.Mapper.
func (d *DiscoveryMapper) ByKind(group, kind string) (model.ResourceInfo, bool) {
	return d.lookup(func(t *model.TableMapper) (model.ResourceInfo, bool) { return t.ByKind(group, kind) })
}

func (d *DiscoveryMapper) lookup(f func(*model.TableMapper) (model.ResourceInfo, bool)) (model.ResourceInfo, bool) {
	d.mu.RLock()
	info, ok := f(d.table)
	stale := d.now().Sub(d.lastRefresh) >= d.minRefresh
	d.mu.RUnlock()
	if ok || !stale {
		return info, ok
	}
	d.refresh()
	d.mu.RLock()
	defer d.mu.RUnlock()
	return f(d.table)
}

func (d *DiscoveryMapper) refresh() {
	d.mu.Lock()
	if d.now().Sub(d.lastRefresh) < d.minRefresh {
		d.mu.Unlock()
		return
	}
	d.lastRefresh = d.now()
	d.mu.Unlock()

	// Partial results are normal (an aggregated API down): keep whatever groups answered.
	lists, _ := discovery.ServerPreferredResources(d.client)
	var infos []model.ResourceInfo
	for _, list := range lists {
		group, version := model.SplitAPIVersion(list.GroupVersion)
		for _, r := range list.APIResources {
			if r.Kind == "" || containsSlash(r.Name) {
				continue
			}
			infos = append(infos, model.ResourceInfo{Group: group, Version: version, Resource: r.Name, Kind: r.Kind, Namespaced: r.Namespaced})
		}
	}
	if len(infos) == 0 {
		return
	}
	t := model.NewTableMapper(infos)
	d.mu.Lock()
	d.table = t
	d.mu.Unlock()
}

func containsSlash(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] == '/' {
			return true
		}
	}
	return false
}
