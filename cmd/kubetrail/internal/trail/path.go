package trail

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// A FieldPath is a field path as the audit receiver writes them in its diffs
// (receiver/k8sauditreceiver: "Paths read the way people write them"): spec.replicas,
// spec.template.spec.containers[name=nginx].image, status.conditions[type=Ready].status,
// metadata.labels["app.kubernetes.io/name"], spec.ports[1].port.
type FieldPath []Segment

// Segment is one step of a FieldPath: a key of an object, an index of a list, or the element of
// a list whose Field (name or type) is Value.
type Segment struct {
	Key   string // an object's key, when not a list step
	Index int    // a list's index, when IsIndex
	Field string // the list element's key field (name, type), when a match step
	Value string // the value that field has
	// IsIndex tells an index step from a key step (Key "" is a valid key, quoted).
	IsIndex bool
}

func (s Segment) isMatch() bool { return s.Field != "" }

// errCutPath is a path the receiver cut at its bound (a long label key): it names no field.
var errCutPath = errors.New("the path was cut at the receiver's bound")

// ParseFieldPath reads a field path. It checks the form only: which fields an object has is
// the API's business, and a custom resource's are not known here.
func ParseFieldPath(s string) (FieldPath, error) {
	if s == "" {
		return nil, errors.New("empty field path")
	}
	if strings.Contains(s, "…(") {
		return nil, errCutPath
	}
	var p FieldPath
	i := 0
	for i < len(s) {
		if s[i] == '[' {
			seg, n, err := parseBracket(s[i:])
			if err != nil {
				return nil, fmt.Errorf("%q at byte %d: %w", s, i, err)
			}
			p = append(p, seg)
			i += n
			continue
		}
		if len(p) > 0 {
			if s[i] != '.' {
				return nil, fmt.Errorf("%q at byte %d: unexpected %q; want keys joined by dots, [\"quoted key\"], [N] or [name=…] (e.g. spec.template.spec.containers[name=app].image)", s, i, s[i])
			}
			i++
		}
		j := i
		for j < len(s) && plainKeyByte(s[j]) {
			j++
		}
		if j == i {
			return nil, fmt.Errorf("%q at byte %d: want a key (letters, digits, _ and -), a [\"quoted key\"], [N] or [name=…] (e.g. spec.template.spec.containers[name=app].image)", s, i)
		}
		p = append(p, Segment{Key: s[i:j]})
		i = j
	}
	return p, nil
}

// parseBracket reads one [...] step at the start of s and returns it with its length.
func parseBracket(s string) (Segment, int, error) {
	if len(s) > 1 && s[1] == '"' {
		q, err := strconv.QuotedPrefix(s[1:])
		if err != nil {
			return Segment{}, 0, fmt.Errorf("a [\"quoted key\"] that is not a Go-quoted string: %w", err)
		}
		if len(s) < 1+len(q)+1 || s[1+len(q)] != ']' {
			return Segment{}, 0, errors.New("want ] after a quoted key")
		}
		k, _ := strconv.Unquote(q)
		return Segment{Key: k}, len(q) + 2, nil
	}
	end := strings.IndexByte(s, ']')
	if field, rest, ok := strings.Cut(s[1:max(end, 1)], "="); ok && end > 0 {
		if field != "name" && field != "type" {
			return Segment{}, 0, fmt.Errorf("[%s=…]: lists are matched by name or type", field)
		}
		if strings.HasPrefix(rest, "\"") {
			// A quoted value may hold a ]: read it as a quoted string.
			q, err := strconv.QuotedPrefix(s[1+len(field)+1:])
			if err != nil {
				return Segment{}, 0, fmt.Errorf("[%s=\"…\"]: %w", field, err)
			}
			n := 1 + len(field) + 1 + len(q)
			if len(s) <= n || s[n] != ']' {
				return Segment{}, 0, fmt.Errorf("want ] after [%s=%s", field, q)
			}
			v, _ := strconv.Unquote(q)
			return Segment{Field: field, Value: v}, n + 1, nil
		}
		if rest == "" {
			return Segment{}, 0, fmt.Errorf("[%s=]: want the element's %s", field, field)
		}
		return Segment{Field: field, Value: rest}, end + 1, nil
	}
	if end < 0 {
		return Segment{}, 0, errors.New("want ]")
	}
	n, err := strconv.Atoi(s[1:end])
	if err != nil || n < 0 || s[1] == '+' {
		return Segment{}, 0, fmt.Errorf("[%s]: want an index, a [\"quoted key\"] or [name=…]", s[1:end])
	}
	return Segment{Index: n, IsIndex: true}, end + 1, nil
}

// String writes the path back as the receiver writes it.
func (p FieldPath) String() string {
	var b strings.Builder
	for _, s := range p {
		switch {
		case s.IsIndex:
			b.WriteString("[" + strconv.Itoa(s.Index) + "]")
		case s.isMatch():
			v := s.Value
			if !plainListValue(v) {
				v = strconv.Quote(v)
			}
			b.WriteString("[" + s.Field + "=" + v + "]")
		case plainPathKey(s.Key):
			if b.Len() > 0 {
				b.WriteByte('.')
			}
			b.WriteString(s.Key)
		default:
			b.WriteString("[" + strconv.Quote(s.Key) + "]")
		}
	}
	return b.String()
}

// Overlaps reports whether one path is the other or leads to it: --field spec.template matches
// a change of spec.template.spec.containers[name=app].image, and --field
// spec.template.spec.containers[name=app].image matches the change that added the whole
// container (spec.template.spec.containers[name=app]).
func (p FieldPath) Overlaps(q FieldPath) bool {
	n := min(len(p), len(q))
	for i := 0; i < n; i++ {
		if p[i] != q[i] {
			return false
		}
	}
	return true
}

func plainPathKey(k string) bool {
	if k == "" {
		return false
	}
	for i := 0; i < len(k); i++ {
		if !plainKeyByte(k[i]) {
			return false
		}
	}
	return true
}

func plainListValue(v string) bool {
	if v == "" {
		return false
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; !plainKeyByte(c) && c != '.' && c != ':' {
			return false
		}
	}
	return true
}

func plainKeyByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-'
}
