// Package jsonscan is the audit conversion's JSON scanner, knowing nothing of Kubernetes: it reads
// a document in place, a member or an element at a time (ObjectNext, ArrayNext), validates a value
// (SkipValue) or only finds its end (DelimitValue, for a body nobody will read), reads strings and
// numbers without copying what needs no decoding (ScanString, ReadString, ParseInt), and parses
// a value into a tree (ParseTree: map[string]any, []any, string, json.Number, bool or nil) that
// Marshal encodes back.
//
// The webhook decodes every event with it in one pass over the body: the fields a span needs are
// read in place, request and response bodies are validated (only delimited, for events the
// filters drop) and kept as slices of the request (never copied), and only bodies that are
// diffed, cached or shown are indexed or parsed. Its grammar is RFC 8259's, as strict as
// encoding/json's; strings are decoded as encoding/json decodes them (escapes, surrogate pairs,
// invalid UTF-8 coerced to U+FFFD), and trees are encoded as encoding/json encodes
// map[string]any (sorted keys, no HTML escaping), so spans are byte for byte what they were.
//
// Offsets are byte offsets of the document d every function takes; depth is the nesting of the
// value at hand, bounded by MaxDepth.
package jsonscan
