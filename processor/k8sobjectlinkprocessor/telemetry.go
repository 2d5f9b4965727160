package k8sobjectlinkprocessor

// The attribute keys of the processor's own metrics. The instruments are generated from
// metadata.yaml (internal/metadata), which lists each attribute's values per metric for
// documentation.md: a value added in the code belongs in that list too.
const (
	attrResult = "result" // assignments: created|reused; owner look-ups: hit|miss|error; reconciled: written|conflict
	attrSource = "source" // owner look-ups: relation|apiserver
	attrReason = "reason" // every drop, release, eviction or error says why
)
