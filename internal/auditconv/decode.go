package auditconv

import (
	"fmt"
	"strconv"
	"time"
	"unsafe"

	"github.com/kubetrail/kubetrail/internal/auditconv/internal/jsonscan"
)

// The decoder: an audit body (envelope.go) read in one pass into Events (event.go), each item's
// members decoded in place, its request and response bodies delimited, validated or indexed as
// the converter will use them (filter.go, flat.go), within a memory budget (budget.go).

// What each element of an event's lists (user groups, sourceIPs, annotations, status causes)
// holds, twice over for the slice's growth: a list of empty strings costs five to sixteen times
// its bytes (nodeBytes is an indexed body's).
const (
	stringElemBytes = 2 * int64(unsafe.Sizeof(""))
	annotationBytes = 2 * int64(unsafe.Sizeof(annotation{}))
	causeBytes      = 2 * int64(unsafe.Sizeof(statusCause{}))
	userBytes       = int64(unsafe.Sizeof(userInfo{}))
)

// decodeBody decodes a webhook body: an audit.k8s.io/v1 EventList or a single Event, in one
// pass (see envelope.go and jsonscan). It returns errWrongKind (wrapped) for JSON of another kind and a
// syntax error for anything else. The events' raw bodies are slices of data: data must not
// change while they are in use. An item that is well-formed JSON but not a valid event (a
// field of the wrong type, a malformed timestamp) does not fail the body: it is returned with
// its invalid field set, for the converter to refuse and count alone.
func decodeBody(data []byte) ([]Event, error) { return decodeBodyInto(data, nil, nil) }

// decodeBodyInto is decodeBody that appends the events of a list to reuse[:0] (see eventsPool)
// and reads the bodies as a converter with the filters f will (nil: validate them all, index
// none): it indexes the response bodies the converter will index (see respIndex) and only
// delimits the bodies of events f will drop (see jsonscan.DelimitValue).
func decodeBodyInto(data []byte, reuse []Event, f *filters) ([]Event, error) {
	return decodeBodyLimited(data, reuse, f, nil)
}

// decodeBodyLimited is decodeBodyInto within cost's bounds: it stops at once past the item
// limit (*TooManyItemsError) or when the budget refuses room (errOverBudget).
func decodeBodyLimited(data []byte, reuse []Event, f *filters, cost *decodeCost) ([]Event, error) {
	events, err := decodeDocument(data, true, false, reuse, bodyReader{filter: f, index: f != nil, cost: cost})
	if err != nil {
		return nil, fmt.Errorf("decoding audit body: %w", err)
	}
	return events, nil
}

// decodeLine decodes one audit log line: a single audit.k8s.io/v1 Event, its bodies read as
// a converter with the filters f will (see decodeBodyInto; nothing is indexed for a log line).
func decodeLine(line []byte, f *filters) (Event, error) {
	events, err := decodeDocument(line, false, false, nil, bodyReader{filter: f})
	if err != nil {
		return Event{}, fmt.Errorf("decoding audit log line: %w", err)
	}
	return events[0], nil
}

// decodeDocument decodes an Event, or with lists an EventList, which shares the Event's
// top-level kind and apiVersion: the members of both are read in one loop. With item, the
// document may also be an EventList's item: an Event without kind and apiVersion.
func decodeDocument(d []byte, lists, item bool, items []Event, r bodyReader) ([]Event, error) {
	var ev Event
	shape, _, _, err := readDocument(d, lists, item,
		// The document's own members are decoded into an event too (a single Event's are all
		// of it): its memory is charged, but it is no item of a list.
		func() error { return r.cost.add(eventBytes) },
		func(i int) (end int, err error) {
			items, end, err = decodeItems(d, i, items[:0], r)
			return end, err
		},
		func(key []byte, i int) (int, error) { return ev.decodeField(d, key, i, 1, r) })
	switch {
	case err != nil:
		return nil, err
	case shape == docList:
		if items == nil {
			items = []Event{}
		}
		return items, nil
	default:
		return []Event{ev}, nil
	}
}

// decodeItems decodes an EventList's items. An item that is not an object becomes an invalid
// event; a null item an empty one (encoding/json's reading, which the converter filters).
func decodeItems(d []byte, i int, items []Event, r bodyReader) ([]Event, int, error) {
	end, err := eachItem(d, i, func(next int) (int, error) {
		if err := r.cost.item(); err != nil {
			return 0, err
		}
		if len(items) < cap(items) {
			// A pooled event, reset by putEvents: decoded into, it reuses its storage.
			items = items[:len(items)+1]
		} else {
			items = append(items, Event{})
		}
		ev := &items[len(items)-1]
		switch d[next] {
		case '{':
			return ev.decode(d, next, 2, r)
		case 'n':
			return jsonscan.ScanLiteral(d, next, "null")
		default:
			ev.invalidate("item", "not an object")
			return jsonscan.SkipValue(d, next, 2)
		}
	})
	if err != nil {
		return nil, 0, err
	}
	return items, end, nil
}

// decode reads an event object at d[i].
func (ev *Event) decode(d []byte, i, depth int, r bodyReader) (int, error) {
	i++
	for first := true; ; first = false {
		key, next, done, err := jsonscan.ObjectNext(d, i, first)
		if err != nil || done {
			return next, err
		}
		if i, err = ev.decodeField(d, key, next, depth+1, r); err != nil {
			return 0, err
		}
	}
}

// decodeField reads one member of an event; unknown members are skipped. It returns a syntax
// error only: a value of the wrong type invalidates the event and is skipped.
func (ev *Event) decodeField(d []byte, key []byte, i, depth int, r bodyReader) (int, error) {
	switch string(key) {
	case "level":
		return ev.sym(d, i, &ev.Level, "level")
	case "auditID":
		return ev.str(d, i, &ev.AuditID, "auditID")
	case "stage":
		return ev.sym(d, i, &ev.Stage, "stage")
	case "requestURI":
		return ev.str(d, i, &ev.RequestURI, "requestURI")
	case "verb":
		return ev.sym(d, i, &ev.Verb, "verb")
	case "userAgent":
		return ev.sym(d, i, &ev.UserAgent, "userAgent")
	case "user":
		return ev.user(d, i, &ev.User, "user", depth, r.cost)
	case "impersonatedUser":
		if d[i] == 'n' {
			ev.ImpersonatedUser = nil
			return jsonscan.ScanLiteral(d, i, "null")
		}
		if err := r.cost.add(userBytes); err != nil {
			return 0, err
		}
		u := &userInfo{}
		end, err := ev.user(d, i, u, "impersonatedUser", depth, r.cost)
		if d[i] == '{' {
			ev.ImpersonatedUser = u
		}
		return end, err
	case "sourceIPs":
		return ev.strs(d, i, &ev.SourceIPs, "sourceIPs", depth, r.cost)
	case "objectRef":
		return ev.objectRef(d, i, depth)
	case "responseStatus":
		return ev.status(d, i, depth, r.cost)
	case "requestObject":
		end, err := ev.body(d, i, depth, r, requestBody)
		if err != nil {
			return 0, err
		}
		ev.RequestObject = d[i:end:end]
		return end, nil
	case "responseObject":
		putNodes(ev.respIndex.nodes) // a second responseObject member: the last one counts
		ev.respIndex = flatBody{}
		end, err := ev.body(d, i, depth, r, responseBody)
		if err != nil {
			return 0, err
		}
		ev.ResponseObject = d[i:end:end]
		return end, nil
	case "requestReceivedTimestamp":
		return ev.time(d, i, &ev.RequestReceivedTimestamp, "requestReceivedTimestamp", depth)
	case "stageTimestamp":
		return ev.time(d, i, &ev.StageTimestamp, "stageTimestamp", depth)
	case "annotations":
		ev.Annotations = ev.Annotations[:0]
		return ev.object(d, i, "annotations", depth, func(key []byte, i int) (int, error) {
			if err := r.cost.add(annotationBytes); err != nil {
				return 0, err
			}
			var v string
			end, err := ev.sym(d, i, &v, "annotations")
			ev.Annotations = append(ev.Annotations, annotation{Key: symbols.of(key), Value: v})
			return end, err
		})
	default:
		return jsonscan.SkipValue(d, i, depth)
	}
}

// bodyReader is how the decoder reads bodies: as a converter with the filters filter will use
// them (nil: validate every body), indexing the responses it indexes when index is set.
type bodyReader struct {
	filter *filters
	index  bool
	// cost, when set, bounds what the decoded events may hold (see decodeCost).
	cost *decodeCost
}

// body finds the end of the request or response body at d[i]. It only delimits the body when
// the converter's filters will drop the event, as far as the members read so far tell (the
// apiserver writes stage, verb and objectRef before the bodies); it indexes a response the
// converter will index (respIndex); it validates any other.
func (ev *Event) body(d []byte, i, depth int, r bodyReader, which bodySet) (int, error) {
	if r.filter != nil && r.filter.filterReason(ev) != "" {
		ev.delimited |= which
		return jsonscan.DelimitValue(d, i)
	}
	ev.delimited &^= which
	if which == responseBody && r.index && d[i] == '{' && ev.indexWhileDecoding() {
		f, end, err := flattenAt(d, i, depth, getNodes(), r.cost)
		if err != nil {
			return 0, err
		}
		ev.respIndex = f
		return end, nil
	}
	return jsonscan.SkipValue(d, i, depth)
}

// indexWhileDecoding reports whether a response body is worth indexing as it is decoded: the
// converter indexes the object's own or status response of a completed write anyway.
func (ev *Event) indexWhileDecoding() bool {
	return ev.Stage == stageResponseComplete && writeVerbs[ev.Verb] && ev.ObjectRef != nil &&
		(ev.ObjectRef.Subresource == "" || ev.ObjectRef.Subresource == "status")
}

// str reads a string member; null leaves it empty.
func (ev *Event) str(d []byte, i int, dst *string, field string) (int, error) {
	return ev.readStr(d, i, dst, field, false)
}

// sym is str for the fields whose values recur from event to event (verbs, stages, user names
// and groups, user agents, resources, namespaces): their strings come from symbols.
func (ev *Event) sym(d []byte, i int, dst *string, field string) (int, error) {
	return ev.readStr(d, i, dst, field, true)
}

func (ev *Event) readStr(d []byte, i int, dst *string, field string, recurs bool) (int, error) {
	switch d[i] {
	case '"':
		if recurs {
			end, plain, err := jsonscan.ScanString(d, i)
			if err != nil {
				return 0, err
			}
			*dst = symbols.ofQuoted(d[i+1:end-1], plain)
			return end, nil
		}
		s, end, err := jsonscan.ReadString(d, i)
		*dst = s
		return end, err
	case 'n':
		return jsonscan.ScanLiteral(d, i, "null")
	}
	end, err := jsonscan.SkipValue(d, i, 0)
	ev.invalidate(field, "not a string")
	return end, err
}

func (ev *Event) strs(d []byte, i int, dst *[]string, field string, depth int, cost *decodeCost) (int, error) {
	switch d[i] {
	case 'n':
		*dst = nil
		return jsonscan.ScanLiteral(d, i, "null")
	case '[':
	default:
		end, err := jsonscan.SkipValue(d, i, depth)
		ev.invalidate(field, "not an array")
		return end, err
	}
	out := (*dst)[:0]
	i++
	for first := true; ; first = false {
		next, done, err := jsonscan.ArrayNext(d, i, first)
		if err != nil {
			return 0, err
		}
		if done {
			if out == nil {
				out = []string{}
			}
			*dst = out
			return next, nil
		}
		if err := cost.add(stringElemBytes); err != nil {
			return 0, err
		}
		var s string
		if i, err = ev.sym(d, next, &s, field); err != nil {
			return 0, err
		}
		out = append(out, s)
	}
}

// object reads an object member with fn for each of its members; null is left as is.
func (ev *Event) object(d []byte, i int, field string, depth int, fn func(key []byte, i int) (int, error)) (int, error) {
	switch d[i] {
	case 'n':
		return jsonscan.ScanLiteral(d, i, "null")
	case '{':
	default:
		end, err := jsonscan.SkipValue(d, i, depth)
		ev.invalidate(field, "not an object")
		return end, err
	}
	i++
	for first := true; ; first = false {
		key, next, done, err := jsonscan.ObjectNext(d, i, first)
		if err != nil || done {
			return next, err
		}
		if i, err = fn(key, next); err != nil {
			return 0, err
		}
	}
}

func (ev *Event) user(d []byte, i int, u *userInfo, field string, depth int, cost *decodeCost) (int, error) {
	return ev.object(d, i, field, depth, func(key []byte, i int) (int, error) {
		switch string(key) {
		case "username":
			return ev.sym(d, i, &u.Username, field+".username")
		case "groups":
			return ev.strs(d, i, &u.Groups, field+".groups", depth+1, cost)
		default:
			return jsonscan.SkipValue(d, i, depth+1)
		}
	})
}

func (ev *Event) objectRef(d []byte, i int, depth int) (int, error) {
	if d[i] == 'n' {
		ev.ObjectRef = nil
		return jsonscan.ScanLiteral(d, i, "null")
	}
	ref := ev.ObjectRef
	if ref == nil {
		ref = &ev.storage().ref
	}
	end, err := ev.object(d, i, "objectRef", depth, func(key []byte, i int) (int, error) {
		switch string(key) {
		case "resource":
			return ev.sym(d, i, &ref.Resource, "objectRef.resource")
		case "namespace":
			return ev.sym(d, i, &ref.Namespace, "objectRef.namespace")
		case "name":
			return ev.str(d, i, &ref.Name, "objectRef.name")
		case "uid":
			return ev.str(d, i, &ref.UID, "objectRef.uid")
		case "apiGroup":
			return ev.sym(d, i, &ref.APIGroup, "objectRef.apiGroup")
		case "apiVersion":
			return ev.sym(d, i, &ref.APIVersion, "objectRef.apiVersion")
		case "resourceVersion":
			return ev.str(d, i, &ref.ResourceVersion, "objectRef.resourceVersion")
		case "subresource":
			return ev.sym(d, i, &ref.Subresource, "objectRef.subresource")
		default:
			return jsonscan.SkipValue(d, i, depth+1)
		}
	})
	if d[i] == '{' {
		ev.ObjectRef = ref
	}
	return end, err
}

func (ev *Event) status(d []byte, i int, depth int, cost *decodeCost) (int, error) {
	if d[i] == 'n' {
		ev.ResponseStatus = nil
		return jsonscan.ScanLiteral(d, i, "null")
	}
	st := ev.ResponseStatus
	if st == nil {
		st = &ev.storage().st
	}
	end, err := ev.object(d, i, "responseStatus", depth, func(key []byte, i int) (int, error) {
		switch string(key) {
		case "code":
			return ev.int(d, i, &st.Code, "responseStatus.code")
		case "status":
			return ev.str(d, i, &st.Status, "responseStatus.status")
		case "message":
			return ev.str(d, i, &st.Message, "responseStatus.message")
		case "reason":
			return ev.str(d, i, &st.Reason, "responseStatus.reason")
		case "details":
			return ev.details(d, i, st, depth+1, cost)
		default:
			return jsonscan.SkipValue(d, i, depth+1)
		}
	})
	if d[i] == '{' {
		ev.ResponseStatus = st
	}
	return end, err
}

func (ev *Event) details(d []byte, i int, st *status, depth int, cost *decodeCost) (int, error) {
	if d[i] == 'n' {
		st.Details = nil
		return jsonscan.ScanLiteral(d, i, "null")
	}
	det := st.Details
	if det == nil {
		det = &statusDetails{}
	}
	end, err := ev.object(d, i, "responseStatus.details", depth, func(key []byte, i int) (int, error) {
		if string(key) != "causes" {
			return jsonscan.SkipValue(d, i, depth+1)
		}
		switch d[i] {
		case 'n':
			det.Causes = nil
			return jsonscan.ScanLiteral(d, i, "null")
		case '[':
		default:
			end, err := jsonscan.SkipValue(d, i, depth+1)
			ev.invalidate("responseStatus.details.causes", "not an array")
			return end, err
		}
		det.Causes = det.Causes[:0]
		i++
		for first := true; ; first = false {
			next, done, err := jsonscan.ArrayNext(d, i, first)
			if err != nil || done {
				if det.Causes == nil {
					det.Causes = []statusCause{}
				}
				return next, err
			}
			if err := cost.add(causeBytes); err != nil {
				return 0, err
			}
			var c statusCause
			i, err = ev.object(d, next, "responseStatus.details.causes", depth+2, func(key []byte, i int) (int, error) {
				switch string(key) {
				case "reason":
					return ev.str(d, i, &c.Type, "responseStatus.details.causes.reason")
				case "message":
					return ev.str(d, i, &c.Message, "responseStatus.details.causes.message")
				case "field":
					return ev.str(d, i, &c.Field, "responseStatus.details.causes.field")
				default:
					return jsonscan.SkipValue(d, i, depth+3)
				}
			})
			if err != nil {
				return 0, err
			}
			det.Causes = append(det.Causes, c)
		}
	})
	if d[i] == '{' {
		st.Details = det
	}
	return end, err
}

// int reads an integer member that fits an int; null leaves it zero.
func (ev *Event) int(d []byte, i int, dst *int, field string) (int, error) {
	if d[i] == 'n' {
		return jsonscan.ScanLiteral(d, i, "null")
	}
	if d[i] == '"' || d[i] == '{' || d[i] == '[' || d[i] == 't' || d[i] == 'f' {
		end, err := jsonscan.SkipValue(d, i, 0)
		ev.invalidate(field, "not a number")
		return end, err
	}
	end, err := jsonscan.ScanNumber(d, i)
	if err != nil {
		return 0, err
	}
	n, perr := strconv.ParseInt(string(d[i:end]), 10, 0)
	if perr != nil {
		ev.invalidate(field, "not an integer")
		return end, nil
	}
	*dst = int(n)
	return end, nil
}

// time reads an RFC 3339 timestamp member; null leaves it zero.
func (ev *Event) time(d []byte, i int, dst *time.Time, field string, depth int) (int, error) {
	switch d[i] {
	case 'n':
		return jsonscan.ScanLiteral(d, i, "null")
	case '"':
	default:
		end, err := jsonscan.SkipValue(d, i, depth)
		ev.invalidate(field, "not a string")
		return end, err
	}
	end, plain, err := jsonscan.ScanString(d, i)
	if err != nil {
		return 0, err
	}
	var t time.Time
	if !plain || t.UnmarshalText(d[i+1:end-1]) != nil {
		ev.invalidate(field, "not an RFC 3339 timestamp")
		return end, nil
	}
	*dst = t
	return end, nil
}
