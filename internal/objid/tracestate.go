package objid

import (
	"errors"
	"strconv"
	"strings"
	"time"
)

// TraceStateKey is the W3C trace-state member that names the object a span's work is about
// (docs/span-model.md, Controller span). A controller's span started with pkg/objecttrace
// carries it, and so does every span that descends from it, in the controller and, through the
// traceparent and tracestate headers, in the apiserver: k8s_object_link moves all of them into
// the trace of the object's window.
const TraceStateKey = "kubetrail"

// traceStateVersion is the first field of the value; a reader refuses other versions.
const traceStateVersion = "1"

// maxTraceStateValue is W3C's bound on a member's value.
const maxTraceStateValue = 256

// ObjectRef is what the trace-state member says: the object's cluster (the collector's cluster
// setting) and UID, and the start of the window its spans belong to.
type ObjectRef struct {
	Cluster string
	UID     string
	Window  time.Time
}

// Errors of EncodeTraceState and DecodeTraceState.
var (
	ErrNoUID          = errors.New("the object has no UID (it was never stored: start the span after the write that created it)")
	ErrTraceStateSize = errors.New("the cluster name and UID do not fit a trace-state value (256 bytes)")
	ErrTraceState     = errors.New("not a kubetrail trace-state value")
)

// EncodeTraceState returns the member's value: "1/<window start, Unix nanoseconds in base
// 36>/<UID>/<cluster>", the cluster percent-escaped where W3C forbids a character (',', '=',
// anything outside printable ASCII) and for '%' itself. A UID may not hold '/'.
func EncodeTraceState(ref ObjectRef) (string, error) {
	if ref.UID == "" {
		return "", ErrNoUID
	}
	if strings.ContainsAny(ref.UID, "/,=% ") || !printable(ref.UID) {
		return "", ErrTraceState
	}
	var b strings.Builder
	b.WriteString(traceStateVersion)
	b.WriteByte('/')
	b.WriteString(strconv.FormatInt(ref.Window.UnixNano(), 36))
	b.WriteByte('/')
	b.WriteString(ref.UID)
	b.WriteByte('/')
	const hex = "0123456789ABCDEF"
	for i := 0; i < len(ref.Cluster); i++ {
		c := ref.Cluster[i]
		if c <= 0x20 || c >= 0x7f || c == ',' || c == '=' || c == '%' {
			b.WriteByte('%')
			b.WriteByte(hex[c>>4])
			b.WriteByte(hex[c&15])
			continue
		}
		b.WriteByte(c)
	}
	if b.Len() > maxTraceStateValue {
		return "", ErrTraceStateSize
	}
	return b.String(), nil
}

// DecodeTraceState reads a value EncodeTraceState wrote.
func DecodeTraceState(v string) (ObjectRef, error) {
	var ref ObjectRef
	version, rest, ok := strings.Cut(v, "/")
	if !ok || version != traceStateVersion || len(v) > maxTraceStateValue {
		return ref, ErrTraceState
	}
	w, rest, ok := strings.Cut(rest, "/")
	if !ok {
		return ref, ErrTraceState
	}
	ns, err := strconv.ParseInt(w, 36, 64)
	if err != nil {
		return ref, ErrTraceState
	}
	uid, cluster, ok := strings.Cut(rest, "/")
	if !ok || uid == "" || !printable(uid) {
		return ref, ErrTraceState
	}
	if strings.IndexByte(cluster, '%') >= 0 {
		var b strings.Builder
		for i := 0; i < len(cluster); i++ {
			if cluster[i] != '%' {
				b.WriteByte(cluster[i])
				continue
			}
			if i+2 >= len(cluster) {
				return ref, ErrTraceState
			}
			n, err := strconv.ParseUint(cluster[i+1:i+3], 16, 8)
			if err != nil {
				return ref, ErrTraceState
			}
			b.WriteByte(byte(n))
			i += 2
		}
		cluster = b.String()
	}
	return ObjectRef{Cluster: cluster, UID: uid, Window: time.Unix(0, ns).UTC()}, nil
}

// FindTraceState returns the value of the kubetrail member in a W3C tracestate header value
// ("k1=v1,k2=v2"), if there is one.
func FindTraceState(header string) (string, bool) {
	for header != "" {
		var member string
		member, header, _ = strings.Cut(header, ",")
		k, v, ok := strings.Cut(strings.TrimSpace(member), "=")
		if ok && k == TraceStateKey {
			return v, true
		}
	}
	return "", false
}

func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] <= 0x20 || s[i] >= 0x7f {
			return false
		}
	}
	return true
}
