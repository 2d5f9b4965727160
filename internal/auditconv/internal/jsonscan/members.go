package jsonscan

import "strconv"

// ScanMember reads the string member name of the object at d[i] (at nesting depth) into dst
// (the last one counts; a value of another type counts as ""); anything else, or a value that
// is not an object, is skipped.
func ScanMember(d []byte, i, depth int, name string, dst *string) (int, error) {
	return ScanMembers(d, i, depth, StringMembers(name, dst, name, dst))
}

// ScanMembers walks the object at d[i] (at nesting depth): read is given each member's key and
// value offset, and reads the value (returning the offset after it and true) or leaves it to be
// skipped (false). A value that is not an object is skipped.
func ScanMembers(d []byte, i, depth int, read func(key, d []byte, vi int) (int, bool, error)) (int, error) {
	if d[i] != '{' {
		return SkipValue(d, i, depth)
	}
	i++
	for first := true; ; first = false {
		key, next, done, err := ObjectNext(d, i, first)
		if err != nil || done {
			return next, err
		}
		end, ok, err := read(key, d, next)
		if err != nil {
			return 0, err
		}
		if ok {
			i = end
		} else if i, err = SkipValue(d, next, depth+1); err != nil {
			return 0, err
		}
	}
}

// StringMembers reads the string members a and b (the last one counts; a value of another
// type counts as "") into da and db, for ScanMembers.
func StringMembers(a string, da *string, b string, db *string) func(key, d []byte, vi int) (int, bool, error) {
	return func(key, d []byte, vi int) (int, bool, error) {
		var dst *string
		switch string(key) {
		case a:
			dst = da
		case b:
			dst = db
		default:
			return 0, false, nil
		}
		v, end, err := AnyString(d, vi)
		*dst = v
		return end, true, err
	}
}

// AnyInt reads a value that counts only when it is an integer (0 otherwise).
func AnyInt(d []byte, i int) (int64, int, error) {
	end, err := SkipValue(d, i, 2)
	if err != nil {
		return 0, 0, err
	}
	if c := d[i]; c == '-' || (c >= '0' && c <= '9') {
		return ParseInt(d[i:end]), end, nil
	}
	return 0, end, nil
}

// ParseInt is the integer a JSON number's text spells, 0 when it is not one (a fraction, an
// exponent, out of range), as strconv.ParseInt.
func ParseInt(b []byte) int64 {
	v, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil {
		return 0
	}
	return v
}

// AnyString reads a value that counts only when it is a string.
func AnyString(d []byte, i int) (string, int, error) {
	if d[i] == '"' {
		return ReadString(d, i)
	}
	end, err := SkipValue(d, i, 2)
	return "", end, err
}
