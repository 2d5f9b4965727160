package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"slices"
	"strconv"
	"strings"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/kubetrail/kubetrail/internal/model"
	"github.com/kubetrail/kubetrail/pkg/objecttrace"
)

const (
	annChildren    = "kubetrail.dev/children"
	annReady       = "kubetrail.dev/children-ready"
	labelParentUID = "kubetrail.dev/parent-uid" // on children, to list them by their parent
	maxChildren    = 20
)

var configMapGVK = corev1.SchemeGroupVersion.WithKind("ConfigMap")

type controller struct {
	client   kubernetes.Interface
	parents  corelisters.ConfigMapLister
	synced   cache.InformerSynced
	queue    workqueue.TypedRateLimitingInterface[string]
	objects  *objecttrace.Tracer
	tracer   trace.Tracer
	endTrace bool
}

func newController(client kubernetes.Interface, informer coreinformers.ConfigMapInformer, objects *objecttrace.Tracer, tracer trace.Tracer, endTrace bool) *controller {
	c := &controller{
		client: client, parents: informer.Lister(), synced: informer.Informer().HasSynced,
		queue:   workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]()),
		objects: objects, tracer: tracer, endTrace: endTrace,
	}
	_, _ = informer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.enqueue,
		UpdateFunc: func(_, obj any) { c.enqueue(obj) },
		DeleteFunc: c.enqueue,
	})
	return c
}

// enqueue queues a parent when it changes, and a child's parent when the child changes (a child
// deleted by hand is made again).
func (c *controller) enqueue(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	cm, ok := obj.(*corev1.ConfigMap)
	if !ok {
		return
	}
	if _, ok := cm.Annotations[annChildren]; ok {
		c.queue.Add(cm.Namespace + "/" + cm.Name)
	}
	if ref := metav1.GetControllerOfNoCopy(cm); ref != nil && ref.APIVersion == "v1" && ref.Kind == "ConfigMap" {
		c.queue.Add(cm.Namespace + "/" + ref.Name)
	}
}

func (c *controller) run(ctx context.Context, workers int) error {
	defer c.queue.ShutDown()
	if !cache.WaitForCacheSync(ctx.Done(), c.synced) {
		if ctx.Err() != nil {
			return nil // stopped before the first list
		}
		return errors.New("the ConfigMap informer did not sync")
	}
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				if !c.processNext(ctx) {
					return
				}
			}
		})
	}
	<-ctx.Done()
	c.queue.ShutDown()
	wg.Wait()
	return nil
}

func (c *controller) processNext(ctx context.Context) bool {
	key, quit := c.queue.Get()
	if quit {
		return false
	}
	defer c.queue.Done(key)
	if err := c.reconcile(ctx, key); err != nil {
		log.Printf("%s: %s: %v (will retry)", name, key, err)
		c.queue.AddRateLimited(key)
		return true
	}
	c.queue.Forget(key)
	return true
}

// reconcile makes the children of the parent named key what its annotation asks, inside a span
// in the parent's kubetrail trace.
func (c *controller) reconcile(ctx context.Context, key string) (err error) {
	namespace, parentName, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil // enqueue makes every key: cannot happen, and retrying would not help
	}
	parent, err := c.parents.ConfigMaps(namespace).Get(parentName)
	if apierrors.IsNotFound(err) {
		return nil // the garbage collector deletes its children
	}
	if err != nil {
		return err
	}
	want, ok := parent.Annotations[annChildren]
	if !ok {
		return nil // not (or no longer) a parent: its children stay until it goes
	}
	ctx, span := c.objects.StartSpanFromObject(ctx, parent, configMapGVK, "reconcile", objecttrace.WithObjectResource("configmaps"))
	defer func() { endSpan(span, err) }()

	n, perr := parseChildren(want)
	if perr != nil {
		span.SetStatus(codes.Error, perr.Error())
		log.Printf("%s: %s: %v", name, key, perr)
		return nil // retrying does not mend an annotation
	}
	// The API, not the cache: right after this controller's own writes the cache may lag.
	list, err := c.client.CoreV1().ConfigMaps(namespace).List(ctx, metav1.ListOptions{LabelSelector: labelParentUID + "=" + string(parent.UID)})
	if err != nil {
		return err
	}
	create, remove := plan(parent, n, list.Items)
	for _, child := range create {
		if err := c.createChild(ctx, parent, child); err != nil {
			return err
		}
	}
	for _, child := range remove {
		if err := c.deleteChild(ctx, child); err != nil {
			return err
		}
	}
	if len(create)+len(remove) > 0 {
		log.Printf("%s: %s: %d children, created %d, deleted %d", name, key, n, len(create), len(remove))
	}
	return c.markReady(ctx, parent, n)
}

func (c *controller) createChild(ctx context.Context, parent *corev1.ConfigMap, childName string) (err error) {
	ctx, span := c.tracer.Start(ctx, "create child", trace.WithAttributes(attribute.String("childmaker.child", childName)))
	defer func() { endSpan(span, err) }()
	_, err = c.client.CoreV1().ConfigMaps(parent.Namespace).Create(ctx, newChild(ctx, parent, childName), metav1.CreateOptions{FieldManager: name})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

func (c *controller) deleteChild(ctx context.Context, child *corev1.ConfigMap) (err error) {
	ctx, span := c.tracer.Start(ctx, "delete child", trace.WithAttributes(attribute.String("childmaker.child", child.Name)))
	defer func() { endSpan(span, err) }()
	// The UID precondition: never delete a same-named successor.
	err = c.client.CoreV1().ConfigMaps(child.Namespace).Delete(ctx, child.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &child.UID}})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// markReady writes the ready annotation, and with endTrace removes the parent's trace context,
// in one merge patch; it writes nothing when both are already so.
func (c *controller) markReady(ctx context.Context, parent *corev1.ConfigMap, n int) error {
	annotations := map[string]any{}
	if parent.Annotations[annReady] != strconv.Itoa(n) {
		annotations[annReady] = strconv.Itoa(n)
	}
	if c.endTrace && objecttrace.RemoveSpanContextFromObject(parent.DeepCopy()) {
		for _, k := range []string{objecttrace.AnnotationTraceparent, objecttrace.AnnotationTracestate, model.AnnotationLegacyTraceContext} {
			if _, ok := parent.Annotations[k]; ok {
				annotations[k] = nil // null deletes it
			}
		}
	}
	if len(annotations) == 0 {
		return nil
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": annotations}})
	if err != nil {
		return err
	}
	_, err = c.client.CoreV1().ConfigMaps(parent.Namespace).Patch(ctx, parent.Name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: name})
	return err
}

// parseChildren reads the annotation kubetrail.dev/children.
func parseChildren(v string) (int, error) {
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 || n > maxChildren {
		return 0, fmt.Errorf("%s: %q is not a number from 0 to %d", annChildren, v, maxChildren)
	}
	return n, nil
}

func childName(parent string, i int) string {
	return parent + "-child-" + strconv.Itoa(i)
}

// plan returns the names of the children to create, in order, and the children to delete:
// those of existing the parent controls that are not among the n it asks for.
func plan(parent *corev1.ConfigMap, n int, existing []corev1.ConfigMap) (create []string, remove []*corev1.ConfigMap) {
	want := make(map[string]bool, n)
	for i := range n {
		want[childName(parent.Name, i)] = true
	}
	have := make(map[string]bool, len(existing))
	for i := range existing {
		cm := &existing[i]
		if ref := metav1.GetControllerOfNoCopy(cm); ref == nil || ref.UID != parent.UID {
			continue
		}
		have[cm.Name] = true
		if !want[cm.Name] {
			remove = append(remove, cm)
		}
	}
	for i := range n {
		if child := childName(parent.Name, i); !have[child] {
			create = append(create, child)
		}
	}
	slices.SortFunc(remove, func(a, b *corev1.ConfigMap) int { return strings.Compare(a.Name, b.Name) })
	return create, remove
}

// newChild is the child named childName of parent, carrying the trace context of ctx.
func newChild(ctx context.Context, parent *corev1.ConfigMap, childName string) *corev1.ConfigMap {
	child := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:       parent.Namespace,
			Name:            childName,
			Labels:          map[string]string{labelParentUID: string(parent.UID)},
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(parent, configMapGVK)},
		},
		Data: map[string]string{"parent": parent.Name},
	}
	objecttrace.EncodeContextIntoObject(ctx, child)
	return child
}

func endSpan(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}
