package k8sobjectlinkprocessor

import (
	"context"
	"fmt"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/extension/xextension/storage"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.uber.org/zap"
)

// unsentKey is the storage key holding the spans the next consumer still refused at shutdown.
const unsentKey = "unsent"

// Spans in the processor's custody outlive a restart only through the storage extension: held
// spans and owed object spans were acknowledged to the receiver (the audit webhook answered 200
// for them), so when the next consumer refuses them at shutdown (a persistent exporter queue that
// is full because the backend is down) they are written to storage and sent first on the next
// start. They are stored processed (parents set, object spans built), so they go out as they are.

// openStorage connects the storage extension and loads the spans an earlier run left unsent.
func (p *objectLinkProcessor) openStorage(ctx context.Context, host component.Host) error {
	ext, ok := host.GetExtensions()[*p.cfg.Storage]
	if !ok {
		return fmt.Errorf("storage: extension %q is not configured", p.cfg.Storage)
	}
	se, ok := ext.(storage.Extension)
	if !ok {
		return fmt.Errorf("storage: extension %q is not a storage extension", p.cfg.Storage)
	}
	client, err := se.GetClient(ctx, component.KindProcessor, p.id, "")
	if err != nil {
		return fmt.Errorf("storage: client from extension %q: %w", p.cfg.Storage, err)
	}
	raw, err := client.Get(ctx, unsentKey)
	if err != nil {
		_ = client.Close(ctx)
		return fmt.Errorf("storage: reading the spans left unsent: %w", err)
	}
	p.storage = client
	if len(raw) == 0 {
		return nil
	}
	td, err := (&ptrace.ProtoUnmarshaler{}).UnmarshalTraces(raw)
	if err != nil {
		// Not ours to repair: say so and start clean rather than refuse to start.
		p.logger.Error("Spans left unsent by the previous run are unreadable; they are lost", zap.Error(err))
		return client.Delete(ctx, unsentKey)
	}
	// Object spans go back to the owed list, activity spans to the unsent list: send re-sends
	// the first, sendUnsent the second, each keeping its own on a refusal.
	objects, activity := copyObjectSpans(td), copyActivitySpans(td)
	n := activity.SpanCount()
	p.heldMu.Lock()
	objects.ResourceSpans().MoveAndAppendTo(p.owed.ResourceSpans())
	activity.ResourceSpans().MoveAndAppendTo(p.unsent.ResourceSpans())
	p.heldMu.Unlock()
	p.tel.K8sObjectLinkHeldSpans.Add(ctx, int64(n))
	p.logger.Info("Spans left unsent by the previous run are sent first", zap.Int("spans", n))
	return nil
}

// sendUnsent passes on the activity spans kept unsent (from a refused release, or from the
// previous run) with the object spans owed; they stay kept while the next consumer refuses them.
func (p *objectLinkProcessor) sendUnsent(ctx context.Context) error {
	p.heldMu.Lock()
	td := p.unsent
	p.unsent = ptrace.NewTraces()
	p.heldMu.Unlock()
	n := td.SpanCount()
	if n == 0 {
		return nil
	}
	keep := ptrace.NewTraces()
	td.CopyTo(keep)
	if err := p.send(ctx, td, processResult{}); err != nil {
		p.keepUnsent(keep)
		return err
	}
	p.tel.K8sObjectLinkHeldSpans.Add(ctx, -int64(n))
	if p.storage != nil {
		// A crash before this delete sends them twice: a duplicate rather than a loss.
		if err := p.storage.Delete(ctx, unsentKey); err != nil {
			p.logger.Warn("Could not clear the spans kept in storage; a restart sends them again", zap.Error(err))
		}
	}
	return nil
}

// keepUnsent adds processed spans the next consumer refused to the unsent list.
func (p *objectLinkProcessor) keepUnsent(td ptrace.Traces) {
	p.heldMu.Lock()
	td.ResourceSpans().MoveAndAppendTo(p.unsent.ResourceSpans())
	p.heldMu.Unlock()
}

// saveUnsent writes what is still unsent at shutdown (refused spans and owed object spans) to
// storage, or, without storage, counts and reports it as lost. It closes the storage client.
func (p *objectLinkProcessor) saveUnsent(ctx context.Context) error {
	p.heldMu.Lock()
	td := p.unsent
	p.unsent = ptrace.NewTraces()
	unsentCount := td.SpanCount()
	owedCount := p.owed.SpanCount()
	p.owed.ResourceSpans().MoveAndAppendTo(td.ResourceSpans())
	p.heldMu.Unlock()
	n := td.SpanCount()
	p.tel.K8sObjectLinkHeldSpans.Add(ctx, -int64(unsentCount))
	if p.storage == nil {
		if n > 0 {
			p.tel.K8sObjectLinkSpansDropped.Add(ctx, int64(n), metric.WithAttributes(attribute.String(attrReason, reasonShutdownRefused)))
			p.logger.Error("Next consumer refused spans at shutdown and no storage is configured; they are lost",
				zap.Int("spans", n), zap.Int("object_spans", owedCount))
		}
		return nil
	}
	client := p.storage
	p.storage = nil
	var err error
	if n == 0 {
		err = client.Delete(ctx, unsentKey)
	} else {
		var raw []byte
		raw, err = (&ptrace.ProtoMarshaler{}).MarshalTraces(td)
		if err == nil {
			err = client.Set(ctx, unsentKey, raw)
		}
		if err == nil {
			p.logger.Info("Next consumer refused spans at shutdown; kept in storage for the next start", zap.Int("spans", n))
		} else {
			p.tel.K8sObjectLinkSpansDropped.Add(ctx, int64(n), metric.WithAttributes(attribute.String(attrReason, reasonShutdownRefused)))
			p.logger.Error("Could not keep the spans refused at shutdown in storage; they are lost", zap.Int("spans", n), zap.Error(err))
		}
	}
	if closeErr := client.Close(ctx); closeErr != nil && err == nil {
		err = closeErr
	}
	return err
}
