package auditconv

import "unsafe"

// TextView is b as a string that shares b's bytes instead of copying them. Nothing may write to
// b while the string is in use: a look-up key that is not kept, or bytes made once and never
// written again (the edge output's one copy of a webhook body, which its records share).
func TextView(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

// BytesView is s's own bytes, not a copy, for a reader that never writes to what it reads (the
// scanner and the decoders of this package).
func BytesView(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }
