package auditconv

import (
	"fmt"

	"github.com/kubetrail/kubetrail/internal/auditconv/internal/jsonscan"
)

// RawEventName is the event name of a log record that holds one audit event as an EventList
// carried it (RawEvent.Raw: an Event without kind and apiVersion), as k8s_audit's edge output
// writes it; the connector decodes such a record with Converter.DecodeItem.
const RawEventName = "k8s.audit.event"

// RawEvent is one audit event of a body as it was received: its JSON bytes, unchanged, and the
// key of the object it is about, read without decoding anything else. An edge collector
// forwards it as is (k8s_audit's edge output); the key keeps an object's events together (one
// Kafka partition).
type RawEvent struct {
	// Raw is the event's JSON object, a slice of the body it was scanned from: body[i:j], so
	// that its offset in the body is cap(body) - cap(Raw).
	Raw []byte
	// Key is objectRef's apiGroup, resource, namespace and name; all empty for an event
	// without objectRef (a non-resource request).
	Key ObjectKey
}

// ObjectKey names an object as objectRef does. Its strings are shared among events (resources,
// groups and namespaces recur); Name is the event's own.
type ObjectKey struct {
	APIGroup, Resource, Namespace, Name string
}

// ScanEventList splits an audit.k8s.io/v1 EventList (a webhook body) into its events, appended
// to dst[:0]: each item's bytes and object key. The whole body is checked to be well-formed JSON
// and of that kind and apiVersion; nothing else of an event is decoded, and an item that is not
// an object (or null) is kept as it stands, with an empty key, for the consumer to refuse. More
// than maxItems items (0: no limit) stop the scan with *TooManyItemsError.
func ScanEventList(data []byte, maxItems int, dst []RawEvent) ([]RawEvent, error) {
	events, err := scanDocument(data, true, maxItems, dst[:0])
	if err != nil {
		return nil, fmt.Errorf("scanning audit body: %w", err)
	}
	return events, nil
}

// ScanEvent is ScanEventList for one audit.k8s.io/v1 Event (an audit log line).
func ScanEvent(line []byte) (RawEvent, error) {
	events, err := scanDocument(line, false, 0, nil)
	if err != nil {
		return RawEvent{}, fmt.Errorf("scanning audit log line: %w", err)
	}
	return events[0], nil
}

// scanDocument is decodeDocument that keeps each item's bytes and key only.
func scanDocument(d []byte, lists bool, maxItems int, items []RawEvent) ([]RawEvent, error) {
	var own ObjectKey // the document's own objectRef (a single Event)
	created := ""     // and its responseObject's name, for a create that names no object
	shape, start, end, err := readDocument(d, lists, false, nil,
		func(i int) (end int, err error) {
			items, end, err = scanItems(d, i, maxItems, items[:0]) // the last "items" counts, as for the decoder
			return end, err
		},
		func(key []byte, i int) (int, error) {
			switch {
			case string(key) == "objectRef":
				return scanObjectRef(d, i, 1, &own)
			case string(key) == "responseObject" && own.Name == "":
				return scanMetadataName(d, i, 1, false, &created)
			}
			return jsonscan.SkipValue(d, i, 1)
		})
	switch {
	case err != nil:
		return nil, err
	case shape == docList:
		if items == nil {
			items = []RawEvent{}
		}
		return items, nil
	default:
		if own.Name == "" && own.Resource != "" {
			own.Name = created // as scanEventKey keys an item
		}
		return append(items[:0], RawEvent{Raw: d[start:end], Key: own}), nil
	}
}

// scanItems scans an EventList's items array at d[i].
func scanItems(d []byte, i, maxItems int, items []RawEvent) ([]RawEvent, int, error) {
	end, err := eachItem(d, i, func(next int) (int, error) {
		if maxItems > 0 && len(items) >= maxItems {
			return 0, &TooManyItemsError{Max: maxItems}
		}
		var key ObjectKey
		var end int
		var err error
		if d[next] == '{' {
			end, err = scanEventKey(d, next, 2, &key)
		} else {
			end, err = jsonscan.SkipValue(d, next, 2)
		}
		if err == nil {
			items = append(items, RawEvent{Raw: d[next:end], Key: key})
		}
		return end, err
	})
	if err != nil {
		return nil, 0, err
	}
	return items, end, nil
}

// scanEventKey reads the objectRef of the event object at d[i], skipping every other member.
// A create that names no object (a generateName create: the apiserver writes objectRef before
// it picks the name) takes the name of its responseObject, where the level recorded it, so that
// the object's first event is keyed as its later ones are (one Kafka partition, in order).
func scanEventKey(d []byte, i, depth int, key *ObjectKey) (int, error) {
	i++
	created := ""
	for first := true; ; first = false {
		k, next, done, err := jsonscan.ObjectNext(d, i, first)
		if err != nil || done {
			if err == nil && key.Name == "" && key.Resource != "" {
				key.Name = created
			}
			return next, err
		}
		switch {
		case string(k) == "objectRef":
			i, err = scanObjectRef(d, next, depth+1, key)
		case string(k) == "responseObject" && key.Name == "":
			i, err = scanMetadataName(d, next, depth+1, false, &created)
		default:
			i, err = jsonscan.SkipValue(d, next, depth+1)
		}
		if err != nil {
			return 0, err
		}
	}
}

// scanMetadataName reads metadata.name of the object at d[i] into name (left as it is when the
// value is not an object, or has none), skipping everything else; inMetadata says d[i] is the
// metadata object itself.
func scanMetadataName(d []byte, i, depth int, inMetadata bool, name *string) (int, error) {
	return eachMember(d, i, depth, func(k []byte, next int) (int, error) {
		switch {
		case !inMetadata && string(k) == "metadata":
			return scanMetadataName(d, next, depth+1, true, name)
		case inMetadata && string(k) == "name" && d[next] == '"':
			end, plain, err := jsonscan.ScanString(d, next)
			if err == nil {
				if plain {
					*name = string(d[next+1 : end-1])
				} else {
					*name = string(jsonscan.Unquote(d[next+1 : end-1]))
				}
			}
			return end, err
		default:
			return jsonscan.SkipValue(d, next, depth+1)
		}
	})
}

// eachMember calls member with the key and the value's offset of each member of the object at
// d[i], which returns where the value ends; a value that is not an object is skipped whole. It
// returns where the object ends.
func eachMember(d []byte, i, depth int, member func(k []byte, next int) (int, error)) (int, error) {
	if d[i] != '{' {
		return jsonscan.SkipValue(d, i, depth)
	}
	i++
	for first := true; ; first = false {
		k, next, done, err := jsonscan.ObjectNext(d, i, first)
		if err != nil || done {
			return next, err
		}
		if i, err = member(k, next); err != nil {
			return 0, err
		}
	}
}

// scanObjectRef reads apiGroup, resource, namespace and name of the objectRef at d[i]; a value
// that is not a string counts as empty (the converter downstream refuses such an event).
func scanObjectRef(d []byte, i, depth int, key *ObjectKey) (int, error) {
	return eachMember(d, i, depth, func(k []byte, next int) (int, error) {
		var dst *string
		recurs := true
		switch string(k) {
		case "apiGroup":
			dst = &key.APIGroup
		case "resource":
			dst = &key.Resource
		case "namespace":
			dst = &key.Namespace
		case "name":
			dst, recurs = &key.Name, false
		}
		if dst == nil || d[next] != '"' {
			return jsonscan.SkipValue(d, next, depth+1)
		}
		end, plain, err := jsonscan.ScanString(d, next)
		if err != nil {
			return 0, err
		}
		switch {
		case recurs:
			*dst = symbols.ofQuoted(d[next+1:end-1], plain)
		case plain:
			*dst = string(d[next+1 : end-1])
		default:
			*dst = string(jsonscan.Unquote(d[next+1 : end-1]))
		}
		return end, nil
	})
}
