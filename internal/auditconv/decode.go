package auditconv

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/kubetrail/kubetrail/internal/auditconv/internal/jsonscan"
	"strconv"
	"time"
	"unsafe"
)

// The audit.k8s.io/v1 types, reduced to the fields a span needs. Request and response bodies
// stay raw: only updates, patches, creates and deletes at RequestResponse level ever parse
// them, so the Metadata-level hot path builds no maps.
const (
	auditAPIVersion = "audit.k8s.io/v1"
	kindEventList   = "EventList"
	kindEvent       = "Event"
)

// Event is an audit.k8s.io/v1 Event as the conversion reads it: the members a span needs,
// decoded in one pass, and the request and response bodies as slices of the document.
type Event struct {
	Level                    string           `json:"level"`
	AuditID                  string           `json:"auditID"`
	Stage                    string           `json:"stage"`
	RequestURI               string           `json:"requestURI"`
	Verb                     string           `json:"verb"`
	User                     userInfo         `json:"user"`
	ImpersonatedUser         *userInfo        `json:"impersonatedUser"`
	SourceIPs                []string         `json:"sourceIPs"`
	UserAgent                string           `json:"userAgent"`
	ObjectRef                *objectReference `json:"objectRef"`
	ResponseStatus           *status          `json:"responseStatus"`
	RequestObject            json.RawMessage  `json:"requestObject"`
	ResponseObject           json.RawMessage  `json:"responseObject"`
	RequestReceivedTimestamp time.Time        `json:"requestReceivedTimestamp"`
	StageTimestamp           time.Time        `json:"stageTimestamp"`

	// Annotations are the event's annotations (authorization decision, admission webhooks,
	// Pod Security, latency breakdown), in the order the apiserver wrote them.
	Annotations []annotation `json:"-"`

	// Invalid says why a well-formed item is not a valid event (a field of the wrong type, a
	// malformed timestamp); the converter refuses such an event alone.
	Invalid string `json:"-"`

	// respIndex is ResponseObject indexed while it was decoded (webhook batches, for a completed
	// write whose verb, stage and objectRef came first, as the apiserver writes them), in nodes
	// from nodePool: the converter takes it (takeResponseIndex) or putEvents returns it.
	respIndex flatBody

	// delimited says which of RequestObject and ResponseObject were delimited, not validated,
	// because the converter's filters were to drop the event (see jsonscan.DelimitValue).
	delimited bodySet

	// spare holds storage an earlier batch's event left for the next one in its place (see
	// reset): the decoder fills it instead of allocating.
	spare *eventStorage
}

// eventStorage is what an event allocates besides its strings.
type eventStorage struct {
	ref objectReference
	st  status
}

// reset empties the event for reuse by a later batch: nothing of it stays readable, but its
// lists keep their (cleared) backing arrays and its objectRef and responseStatus their
// (zeroed) memory, so the next event decoded in its place allocates none of them.
func (ev *Event) reset() {
	groups, ips, ann := ev.User.Groups[:0], ev.SourceIPs[:0], ev.Annotations[:0]
	clear(groups[:cap(groups)])
	clear(ips[:cap(ips)])
	clear(ann[:cap(ann)])
	spare := ev.spare
	if spare != nil {
		*spare = eventStorage{}
	}
	*ev = Event{spare: spare}
	ev.User.Groups, ev.SourceIPs, ev.Annotations = groups, ips, ann
}

// storage returns the event's spare storage, allocated on first use.
func (ev *Event) storage() *eventStorage {
	if ev.spare == nil {
		ev.spare = &eventStorage{}
	}
	return ev.spare
}

// bodySet is a set of an event's bodies.
type bodySet uint8

const (
	requestBody bodySet = 1 << iota
	responseBody
)

// takeResponseIndex hands the index of ResponseObject over to the caller, who returns its nodes
// to nodePool; ok is false when the body was not indexed while decoding.
func (ev *Event) takeResponseIndex() (flatBody, bool) {
	f := ev.respIndex
	ev.respIndex = flatBody{}
	return f, f.nodes != nil
}

// indexWhileDecoding reports whether a response body is worth indexing as it is decoded: the
// converter indexes the object's own or status response of a completed write anyway.
func (ev *Event) indexWhileDecoding() bool {
	return ev.Stage == stageResponseComplete && writeVerbs[ev.Verb] && ev.ObjectRef != nil &&
		(ev.ObjectRef.Subresource == "" || ev.ObjectRef.Subresource == "status")
}

type annotation struct{ Key, Value string }

type userInfo struct {
	Username string   `json:"username"`
	Groups   []string `json:"groups"`
}

type objectReference struct {
	Resource        string `json:"resource"`
	Namespace       string `json:"namespace"`
	Name            string `json:"name"`
	UID             string `json:"uid"`
	APIGroup        string `json:"apiGroup"`
	APIVersion      string `json:"apiVersion"`
	ResourceVersion string `json:"resourceVersion"`
	Subresource     string `json:"subresource"`
}

// status is metav1.Status as the audit event's responseStatus carries it.
type status struct {
	Code    int            `json:"code"`
	Status  string         `json:"status"`
	Message string         `json:"message"`
	Reason  string         `json:"reason"`
	Details *statusDetails `json:"details"`
}

type statusDetails struct {
	Causes []statusCause `json:"causes"`
}

type statusCause struct {
	Type    string `json:"reason"`
	Message string `json:"message"`
	Field   string `json:"field"`
}

// errWrongKind marks a well-formed JSON body that is not an audit.k8s.io/v1 Event or EventList.
var errWrongKind = errors.New("not an audit.k8s.io/v1 EventList or Event")

// errOverBudget says the budget a body was decoded against (DecodeLimits.Charge) refused room
// for more decoded events.
var errOverBudget = errors.New("the decoded events would pass the memory budget")

// errValuesOverBudget is errOverBudget refused for the values of a body being indexed: a body of
// millions of tiny values (`[0,0,…]`) costs an index node for each of them, many times its
// bytes.
var errValuesOverBudget = fmt.Errorf("the values of a body: %w", errOverBudget)

// TooManyItemsError says an EventList had more items than DecodeLimits.MaxItems: decoding
// stopped at the first item past the limit.
type TooManyItemsError struct{ Max int }

// Error names the limit.
func (e *TooManyItemsError) Error() string {
	return fmt.Sprintf("more than %d items in the EventList", e.Max)
}

// eventBytes estimates the memory one decoded event holds, besides the bytes of its body, until
// its batch is converted and consumed: the Event (400 bytes) twice over (a slice grown by append
// has up to twice its length in capacity, and the array it outgrew stays until collected), the
// objectRef and responseStatus storage (192), and the span the converter makes of it (about
// 1.4 KB of pdata for a Metadata-level create: the decode and conversion of 10,000 minimal
// traced events leave some 1.85 KB each on the heap besides the body, by runtime.MemStats).
// An item of two bytes ({} and its comma) costs as much: it is the item count, not the body's
// size, that this charges for.
const eventBytes = 2 << 10

// What each element of an event's lists (user groups, sourceIPs, annotations, status causes)
// and each node of a response body indexed while decoding holds, twice over for the slice's
// growth: a list of empty strings costs five to sixteen times its bytes.
const (
	stringElemBytes = 2 * int64(unsafe.Sizeof(""))
	annotationBytes = 2 * int64(unsafe.Sizeof(annotation{}))
	causeBytes      = 2 * int64(unsafe.Sizeof(statusCause{}))
	userBytes       = int64(unsafe.Sizeof(userInfo{}))
	nodeBytes       = 2 * int64(unsafe.Sizeof(fnode{}))
)

// chargeStep is the least a decoder asks its budget for at a time: one lock of the budget per
// 32 events, not one per event.
const chargeStep = 64 << 10

// decodeCost counts the items of a body and estimates the memory its decoded events hold, and
// asks the caller's budget for it as it grows (see DecodeLimits). A nil *decodeCost counts
// nothing: the file tailer and the connector decode without limits.
type decodeCost struct {
	maxItems int
	charge   func(int64) bool

	items             int
	estimate, charged int64
	// nodes is how many index nodes of the body being indexed have been charged.
	nodes int
}

// nodesHeld charges the index of the response body being indexed (flattenAt) for n nodes, when
// it has been charged for fewer: before the node storage grows to n, and for the nodes it holds
// once it is complete. A refusal is errValuesOverBudget. The count starts afresh for the next
// body.
func (c *decodeCost) nodesHeld(n int) error {
	if c == nil || n <= c.nodes {
		return nil
	}
	more := n - c.nodes
	c.nodes = n
	if err := c.add(int64(more) * nodeBytes); err != nil {
		return errValuesOverBudget
	}
	return nil
}

// item counts one more event, failing past maxItems before anything of it is decoded.
func (c *decodeCost) item() error {
	if c == nil {
		return nil
	}
	if c.maxItems > 0 && c.items >= c.maxItems {
		return &TooManyItemsError{Max: c.maxItems}
	}
	c.items++
	return c.add(eventBytes)
}

// add adds n bytes to the estimate and asks the budget for room when it passes what was
// granted.
func (c *decodeCost) add(n int64) error {
	if c == nil {
		return nil
	}
	c.estimate += n
	if c.estimate <= c.charged || c.charge == nil {
		return nil
	}
	step := max(chargeStep, c.estimate-c.charged)
	if !c.charge(step) {
		return errOverBudget
	}
	c.charged += step
	return nil
}

// decodeBody decodes a webhook body: an audit.k8s.io/v1 EventList or a single Event, in one
// pass (see jsonscan.go). It returns errWrongKind (wrapped) for JSON of another kind and a
// syntax error for anything else. The events' raw bodies are slices of data: data must not
// change while they are in use. An item that is well-formed JSON but not a valid event (a
// field of the wrong type, a malformed timestamp) does not fail the body: it is returned with
// its invalid field set, for the converter to refuse and count alone.
func decodeBody(data []byte) ([]Event, error) { return decodeBodyInto(data, nil, nil) }

// decodeBodyInto is decodeBody that appends the events of a list to reuse[:0] (see eventsPool)
// and reads the bodies as the converter c will (nil: validate them all, index none): it
// indexes the response bodies c will index (see respIndex) and only delimits the bodies of
// events c's filters will drop (see jsonscan.DelimitValue).
func decodeBodyInto(data []byte, reuse []Event, c *Converter) ([]Event, error) {
	return decodeBodyLimited(data, reuse, c, nil)
}

// decodeBodyLimited is decodeBodyInto within cost's bounds: it stops at once past the item
// limit (*TooManyItemsError) or when the budget refuses room (errOverBudget).
func decodeBodyLimited(data []byte, reuse []Event, c *Converter, cost *decodeCost) ([]Event, error) {
	events, err := decodeDocument(data, true, false, reuse, bodyReader{conv: c, index: c != nil, cost: cost})
	if err != nil {
		return nil, fmt.Errorf("decoding audit body: %w", err)
	}
	return events, nil
}

// decodeLine decodes one audit log line: a single audit.k8s.io/v1 Event, its bodies read as
// the converter c will (see decodeBodyInto; c never indexes for a log line).
func decodeLine(line []byte, c *Converter) (Event, error) {
	events, err := decodeDocument(line, false, false, nil, bodyReader{conv: c})
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

// invalidate marks the event as not decodable, keeping the first reason.
func (ev *Event) invalidate(field, problem string) {
	if ev.Invalid == "" {
		ev.Invalid = field + ": " + problem
	}
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

// bodyReader is how the decoder reads bodies: as the converter conv will use them (nil:
// validate every body), indexing the responses conv indexes when index is set.
type bodyReader struct {
	conv  *Converter
	index bool
	// cost, when set, bounds what the decoded events may hold (see decodeCost).
	cost *decodeCost
}

// body finds the end of the request or response body at d[i]. It only delimits the body when
// the converter's filters will drop the event, as far as the members read so far tell (the
// apiserver writes stage, verb and objectRef before the bodies); it indexes a response the
// converter will index (respIndex); it validates any other.
func (ev *Event) body(d []byte, i, depth int, r bodyReader, which bodySet) (int, error) {
	if r.conv != nil && r.conv.filterReason(ev) != "" {
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

// hasBody reports whether a raw body is present: the apiserver leaves it out below
// RequestResponse level, and a null is the same as absent.
func hasBody(raw json.RawMessage) bool {
	return len(raw) > 0 && !bytes.Equal(raw, []byte("null"))
}
