//go:build goexperiment.jsonv2

// The hand-written scanner and index (internal/jsonscan, flat.go) measured against the standard
// library's encoding/json/jsontext (Go's JSON v2, behind GOEXPERIMENT=jsonv2) on the same bodies
// (issue 23): `make bench-json` runs these benchmarks; docs/performance.md holds the figures.

package auditconv

import (
	"bytes"
	"encoding/json/jsontext"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/kubetrail/kubetrail/internal/auditconv/auditconvtest"
	"github.com/kubetrail/kubetrail/internal/auditconv/internal/jsonscan"
	"github.com/kubetrail/kubetrail/internal/model"
)

// jtOptions accept what the hand-written scanner accepts: a repeated name (the last counts) and
// invalid UTF-8 (the converter exports it as U+FFFD).
var jtOptions = []jsontext.Options{jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true)}

// jtScanner is scanMeta written with a jsontext.Decoder, reused from body to body.
type jtScanner struct {
	rd  bytes.Reader
	dec *jsontext.Decoder
}

func newJTScanner() *jtScanner {
	s := &jtScanner{}
	s.dec = jsontext.NewDecoder(&s.rd, jtOptions...)
	return s
}

func (s *jtScanner) reset(raw []byte) {
	s.rd.Reset(raw)
	s.dec.Reset(&s.rd, jtOptions...)
}

// scanMeta reads what scanMeta reads, with the same rules (see objectmeta.go).
func (s *jtScanner) scanMeta(raw []byte, keys *contextKeys) (objectMeta, bool) {
	s.reset(raw)
	var m objectMeta
	if s.dec.PeekKind() != '{' {
		return m, false
	}
	if _, err := s.dec.ReadToken(); err != nil {
		return objectMeta{}, false
	}
	for s.dec.PeekKind() != '}' {
		name, err := s.dec.ReadToken()
		if err != nil {
			return objectMeta{}, false
		}
		switch name.String() {
		case "kind":
			m.Kind, err = s.str()
		case "apiVersion":
			m.APIVersion, err = s.str()
		case "metadata":
			m = objectMeta{Kind: m.Kind, APIVersion: m.APIVersion, NodeName: m.NodeName, Target: m.Target,
				Rollout: rollout{ObservedGeneration: m.Rollout.ObservedGeneration}}
			err = s.metadata(&m, keys)
		case "status":
			m.Rollout.ObservedGeneration = 0
			err = s.members(func(key string) (bool, error) {
				if key != "observedGeneration" {
					return false, nil
				}
				var err error
				m.Rollout.ObservedGeneration, err = s.int()
				return true, err
			})
		case "spec":
			m.NodeName = ""
			if m.Kind == "Pod" || m.Kind == "" {
				err = s.member("nodeName", &m.NodeName)
			} else {
				err = s.dec.SkipValue()
			}
		case "target":
			m.Target = ""
			if m.Kind == "Binding" || m.Kind == "" {
				err = s.member("name", &m.Target)
			} else {
				err = s.dec.SkipValue()
			}
		default:
			err = s.dec.SkipValue()
		}
		if err != nil {
			return objectMeta{}, false
		}
	}
	if _, err := s.dec.ReadToken(); err != nil {
		return objectMeta{}, false
	}
	if _, err := s.dec.ReadToken(); !errors.Is(err, io.EOF) {
		return objectMeta{}, false
	}
	if m.Kind != "Pod" {
		m.NodeName = ""
	}
	if m.Kind != "Binding" {
		m.Target = ""
	}
	return m, true
}

// str reads a value that counts only when it is a string.
func (s *jtScanner) str() (string, error) {
	if s.dec.PeekKind() != '"' {
		return "", s.dec.SkipValue()
	}
	tok, err := s.dec.ReadToken()
	return tok.String(), err
}

// members walks an object: read reads a member's value (true) or leaves it to be skipped.
func (s *jtScanner) members(read func(key string) (bool, error)) error {
	if s.dec.PeekKind() != '{' {
		return s.dec.SkipValue()
	}
	if _, err := s.dec.ReadToken(); err != nil {
		return err
	}
	for s.dec.PeekKind() != '}' {
		key, err := s.dec.ReadToken()
		if err != nil {
			return err
		}
		ok, err := read(key.String())
		if err == nil && !ok {
			err = s.dec.SkipValue()
		}
		if err != nil {
			return err
		}
	}
	_, err := s.dec.ReadToken()
	return err
}

// strings reads the string members a and b into da and db, for members.
func (s *jtScanner) strings(a string, da *string, b string, db *string) func(string) (bool, error) {
	return func(key string) (bool, error) {
		var err error
		switch key {
		case a:
			*da, err = s.str()
		case b:
			*db, err = s.str()
		default:
			return false, nil
		}
		return true, err
	}
}

// int reads a value that counts only when it is an integer.
func (s *jtScanner) int() (int64, error) {
	if s.dec.PeekKind() != '0' {
		return 0, s.dec.SkipValue()
	}
	tok, err := s.dec.ReadToken()
	if err != nil {
		return 0, err
	}
	return jsonscan.ParseInt([]byte(tok.String())), nil
}

// member reads the string member name of an object (the last one counts); anything else is skipped.
func (s *jtScanner) member(name string, dst *string) error {
	return s.members(s.strings(name, dst, name, dst))
}

func (s *jtScanner) metadata(m *objectMeta, keys *contextKeys) error {
	return s.members(func(key string) (bool, error) {
		var err error
		switch key {
		case "name":
			m.Name, err = s.str()
		case "namespace":
			m.Namespace, err = s.str()
		case "uid":
			m.UID, err = s.str()
		case "resourceVersion":
			m.ResourceVersion, err = s.str()
		case "ownerReferences":
			m.Owner = ownerRef{}
			err = s.owners(&m.Owner)
		case "annotations":
			m.TraceContexts, m.Rollout.Revision = nil, ""
			err = s.members(func(key string) (bool, error) {
				if key == annotationRevision {
					var err error
					m.Rollout.Revision, err = s.str()
					return true, err
				}
				pos, index, state, ok := keys.match([]byte(key))
				if !ok {
					return false, nil
				}
				v, err := s.str()
				m.TraceContexts = m.TraceContexts.set(pos, index, state, v)
				return true, err
			})
		case "labels":
			m.Rollout.TemplateHash, m.Rollout.RevisionHash = "", ""
			err = s.members(s.strings(labelTemplateHash, &m.Rollout.TemplateHash, labelRevisionHash, &m.Rollout.RevisionHash))
		case "generation":
			m.Rollout.Generation, err = s.int()
		default:
			return false, nil
		}
		return true, err
	})
}

// owners reads the first controlling owner reference.
func (s *jtScanner) owners(owner *ownerRef) error {
	if s.dec.PeekKind() != '[' {
		return s.dec.SkipValue()
	}
	if _, err := s.dec.ReadToken(); err != nil {
		return err
	}
	found := false
	for s.dec.PeekKind() != ']' {
		if s.dec.PeekKind() != '{' {
			if err := s.dec.SkipValue(); err != nil {
				return err
			}
			continue
		}
		if _, err := s.dec.ReadToken(); err != nil {
			return err
		}
		var ref ownerRef
		controller := false
		for s.dec.PeekKind() != '}' {
			key, err := s.dec.ReadToken()
			if err != nil {
				return err
			}
			switch key.String() {
			case "apiVersion":
				ref.APIVersion, err = s.str()
			case "kind":
				ref.Kind, err = s.str()
			case "name":
				ref.Name, err = s.str()
			case "uid":
				ref.UID, err = s.str()
			case "controller":
				controller = s.dec.PeekKind() == 't'
				err = s.dec.SkipValue()
			default:
				err = s.dec.SkipValue()
			}
			if err != nil {
				return err
			}
		}
		if _, err := s.dec.ReadToken(); err != nil {
			return err
		}
		if controller && !found {
			*owner, found = ref, true
		}
	}
	_, err := s.dec.ReadToken()
	return err
}

// jsonBodies are every request and response body of the recorded scenarios and of the benchmark
// capture that audits reads with their bodies.
func jsonBodies(tb testing.TB) (bodies [][]byte, size int) {
	tb.Helper()
	paths, err := filepath.Glob(filepath.Join(auditconvtest.FixturesDir(), "*", "audit-webhook", "*.json"))
	if err != nil || len(paths) == 0 {
		tb.Fatal("no webhook captures")
	}
	var posts [][]byte
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			tb.Fatal(err)
		}
		posts = append(posts, data)
	}
	posts = append(posts, auditconvtest.WebhookBodies(tb, auditconvtest.RequestResponseCapture())...)
	for _, data := range posts {
		evs, err := decodeBody(data)
		if err != nil {
			tb.Fatal(err)
		}
		for _, ev := range evs {
			for _, raw := range [][]byte{ev.RequestObject, ev.ResponseObject} {
				if hasBody(raw) {
					bodies = append(bodies, bytes.Clone(raw))
					size += len(raw)
				}
			}
		}
	}
	return bodies, size
}

// TestJSONTextScanMetaAgrees: the jsontext version reads what scanMeta reads from every body,
// so the benchmark compares the same work.
func TestJSONTextScanMetaAgrees(t *testing.T) {
	bodies, _ := jsonBodies(t)
	jt := newJTScanner()
	for i, raw := range bodies {
		keys := newContextKeys(model.DefaultTraceContextAnnotations())
		want, wantOK := scanMeta(raw, keys)
		got, gotOK := jt.scanMeta(raw, keys)
		if !reflect.DeepEqual(got, want) || gotOK != wantOK {
			t.Fatalf("body %d: jsontext %+v %v, scanMeta %+v %v", i, got, gotOK, want, wantOK)
		}
	}
	t.Logf("%d bodies agree", len(bodies))
}

// BenchmarkJSON compares, body by body: reading the identity (scanMeta), validating a whole body
// (jsonscan.SkipValue / Decoder.SkipValue), and indexing every value (flatten) against reading every
// token (jsontext builds no index: a lower bound of what an index built on it would cost).
func BenchmarkJSON(b *testing.B) {
	bodies, size := jsonBodies(b)
	jt := newJTScanner()
	run := func(name string, f func(raw []byte) bool) {
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(size))
			b.ReportAllocs()
			for b.Loop() {
				for _, raw := range bodies {
					if !f(raw) {
						b.Fatal("a body was refused")
					}
				}
			}
		})
	}
	ann := newContextKeys(model.DefaultTraceContextAnnotations())
	run("scan-meta/ours", func(raw []byte) bool { _, ok := scanMeta(raw, ann); return ok })
	run("scan-meta/jsontext", func(raw []byte) bool { _, ok := jt.scanMeta(raw, ann); return ok })
	run("validate/ours", func(raw []byte) bool { end, err := jsonscan.SkipValue(raw, 0, 0); return err == nil && end == len(raw) })
	run("validate/jsontext", func(raw []byte) bool { jt.reset(raw); return jt.dec.SkipValue() == nil })
	nodes := getNodes()
	run("index/ours", func(raw []byte) bool {
		f, ok := flatten(raw, nodes[:0])
		nodes = f.nodes
		return ok
	})
	run("index/jsontext-tokens", func(raw []byte) bool {
		jt.reset(raw)
		for {
			if _, err := jt.dec.ReadToken(); err != nil {
				return errors.Is(err, io.EOF)
			}
		}
	})
}
