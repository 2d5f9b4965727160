package auditconv

import (
	"errors"
	"fmt"

	"github.com/kubetrail/kubetrail/internal/auditconv/internal/jsonscan"
)

// The envelope of an audit document: an audit.k8s.io/v1 Event, or an EventList of them, read
// member by member (readDocument) and item by item (eachItem). Both readers of a body stand on it:
// the decoder (decode.go), which decodes every item into an Event, and the edge's scan
// (rawscan.go), which keeps each item's bytes and object key only.

// The kind and apiVersion of an audit document.
const (
	auditAPIVersion = "audit.k8s.io/v1"
	kindEventList   = "EventList"
	kindEvent       = "Event"
)

// errWrongKind marks a well-formed JSON body that is not an audit.k8s.io/v1 Event or EventList.
var errWrongKind = errors.New("not an audit.k8s.io/v1 EventList or Event")

// docShape is what a document read by readDocument is.
type docShape uint8

const (
	docList  docShape = iota + 1 // an EventList
	docEvent                     // an Event (or, read as an item, an Event without kind and apiVersion)
)

// readDocument reads the top-level object of an audit.k8s.io/v1 Event or (with lists)
// EventList at d: kind and apiVersion itself, the items array through items (lists only;
// skipped otherwise), every other member through member; begin is called once the document is
// known to be an object. It checks the whole of d is that one value and says which of the two
// the document is (with item, an Event without kind and apiVersion is one); start and end are
// where the object stands in d.
func readDocument(d []byte, lists, item bool, begin func() error, items func(i int) (int, error), member func(key []byte, i int) (int, error)) (shape docShape, start, end int, err error) {
	i := jsonscan.SkipSpace(d, 0)
	if i >= len(d) {
		return 0, 0, 0, jsonscan.ErrorAt(i, "empty body")
	}
	start = i
	if d[i] != '{' {
		end, err := jsonscan.SkipValue(d, i, 0)
		if err != nil {
			return 0, 0, 0, err
		}
		if jsonscan.SkipSpace(d, end) != len(d) {
			return 0, 0, 0, jsonscan.ErrorAt(end, "data after the top-level value")
		}
		return 0, 0, 0, fmt.Errorf("%w: a JSON %s", errWrongKind, jsonKind(d[i]))
	}
	if begin != nil {
		if err := begin(); err != nil {
			return 0, 0, 0, err
		}
	}
	var kind, apiVersion string
	i++
	for first := true; ; first = false {
		var key []byte
		var done bool
		key, i, done, err = jsonscan.ObjectNext(d, i, first)
		if err != nil {
			return 0, 0, 0, err
		}
		if done {
			break
		}
		switch string(key) {
		case "kind":
			kind, i, err = topString(d, i, "kind")
		case "apiVersion":
			apiVersion, i, err = topString(d, i, "apiVersion")
		case "items":
			if lists {
				i, err = items(i)
			} else {
				i, err = jsonscan.SkipValue(d, i, 1)
			}
		default:
			i, err = member(key, i)
		}
		if err != nil {
			return 0, 0, 0, err
		}
	}
	if e := jsonscan.SkipSpace(d, i); e != len(d) {
		return 0, 0, 0, jsonscan.ErrorAt(e, "data after the top-level value")
	}
	if item && kind == "" && apiVersion == "" {
		return docEvent, start, i, nil
	}
	if apiVersion != auditAPIVersion {
		return 0, 0, 0, fmt.Errorf("%w: apiVersion %q", errWrongKind, apiVersion)
	}
	switch {
	case lists && kind == kindEventList:
		return docList, start, i, nil
	case kind == kindEvent:
		return docEvent, start, i, nil
	default:
		return 0, 0, 0, fmt.Errorf("%w: kind %q", errWrongKind, kind)
	}
}

func jsonKind(c byte) string {
	switch c {
	case '[':
		return "array"
	case '"':
		return "string"
	case 'n':
		return "null"
	case 't', 'f':
		return "boolean"
	default:
		return "number"
	}
}

// topString reads the body's kind or apiVersion: a value of another type fails the body.
func topString(d []byte, i int, field string) (string, int, error) {
	switch d[i] {
	case '"':
		return jsonscan.ReadString(d, i)
	case 'n':
		end, err := jsonscan.ScanLiteral(d, i, "null")
		return "", end, err
	}
	if _, err := jsonscan.SkipValue(d, i, 1); err != nil {
		return "", 0, err
	}
	return "", 0, fmt.Errorf("%w: %s is not a string", errWrongKind, field)
}

// eachItem walks the items array of an EventList at d[i], calling item with the offset of each
// element (item returns the offset after it); items null is an empty list, any other value than
// an array not an EventList. It returns the offset after the array.
func eachItem(d []byte, i int, item func(next int) (int, error)) (int, error) {
	switch d[i] {
	case 'n':
		return jsonscan.ScanLiteral(d, i, "null")
	case '[':
	default:
		if _, err := jsonscan.SkipValue(d, i, 1); err != nil {
			return 0, err
		}
		return 0, fmt.Errorf("%w: items is not an array", errWrongKind)
	}
	i++
	for first := true; ; first = false {
		next, done, err := jsonscan.ArrayNext(d, i, first)
		if err != nil {
			return 0, err
		}
		if done {
			return next, nil
		}
		if i, err = item(next); err != nil {
			return 0, err
		}
	}
}
