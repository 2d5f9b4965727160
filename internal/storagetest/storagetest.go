// Package storagetest is an in-memory storage.Client for unit tests: what a file_storage
// extension keeps on disk, without the disk, so checkpoint tests can inspect and share it across
// simulated restarts.
package storagetest

import (
	"context"
	"slices"
	"sync"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/extension/xextension/storage"
)

// MemClient implements storage.Client in memory. It is safe for concurrent use.
type MemClient struct {
	mu     sync.Mutex
	data   map[string][]byte
	closed int
}

var _ storage.Client = (*MemClient)(nil)

// NewMemClient returns an empty client.
func NewMemClient() *MemClient { return &MemClient{data: map[string][]byte{}} }

// Get implements storage.Client; a missing key is nil, nil.
func (m *MemClient) Get(_ context.Context, key string) ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.data[key]), nil
}

// Set implements storage.Client.
func (m *MemClient) Set(_ context.Context, key string, value []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.data[key] = slices.Clone(value)
	return nil
}

// Delete implements storage.Client.
func (m *MemClient) Delete(_ context.Context, key string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.data, key)
	return nil
}

// Batch implements storage.Client, applying the operations in order under one lock.
func (m *MemClient) Batch(_ context.Context, ops ...*storage.Operation) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, op := range ops {
		switch op.Type {
		case storage.Get:
			op.Value = slices.Clone(m.data[op.Key])
		case storage.Set:
			m.data[op.Key] = slices.Clone(op.Value)
		case storage.Delete:
			delete(m.data, op.Key)
		}
	}
	return nil
}

// Close implements storage.Client; the data stays, as a file would across a restart.
func (m *MemClient) Close(context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.closed++
	return nil
}

// Keys is the number of keys held.
func (m *MemClient) Keys() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.data)
}

// Closed is how many times Close was called.
func (m *MemClient) Closed() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.closed
}

// Extension is a storage extension handing out one client, for hosts in unit tests.
type Extension struct {
	component.StartFunc
	component.ShutdownFunc
	Client storage.Client
}

var _ storage.Extension = (*Extension)(nil)

// GetClient implements storage.Extension.
func (e *Extension) GetClient(context.Context, component.Kind, component.ID, string) (storage.Client, error) {
	return e.Client, nil
}

// Host is a component.Host offering the given extensions.
type Host struct {
	component.Host
	Extensions map[component.ID]component.Component
}

// GetExtensions implements component.Host.
func (h *Host) GetExtensions() map[component.ID]component.Component { return h.Extensions }
