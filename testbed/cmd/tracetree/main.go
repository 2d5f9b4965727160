// Command tracetree prints the traces in an OTLP JSON file (the collector's file exporter output,
// one batch per line) as indented trees, with a count of spans per kubetrail span type.
//
//	go run ./testbed/cmd/tracetree [-max-children N] [-traces N] FILE
package main

import (
	"flag"
	"fmt"
	"os"
	"sort"

	"github.com/kubetrail/kubetrail/internal/model"
	"github.com/kubetrail/kubetrail/internal/tracetree"
)

func main() {
	maxChildren := flag.Int("max-children", 6, "children shown per span (0 = all)")
	maxRoots := flag.Int("traces", 3, "trees printed, largest first (0 = all)")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: tracetree [-max-children N] [-traces N] FILE")
		os.Exit(2)
	}
	f, err := os.Open(flag.Arg(0))
	if err != nil {
		fmt.Fprintln(os.Stderr, "tracetree:", err)
		os.Exit(1)
	}
	defer f.Close()
	batches, err := tracetree.ReadOTLPJSONLines(f)
	if err != nil {
		fmt.Fprintln(os.Stderr, "tracetree:", err)
		os.Exit(1)
	}
	forest := tracetree.Build(batches...)

	byType := map[string]int{}
	traces := map[string]bool{}
	for ref, n := range forest.Nodes {
		byType[n.Attr(model.AttrSpanType)]++
		traces[ref.Trace.String()] = true
	}
	fmt.Printf("%d spans in %d traces:", len(forest.Nodes), len(traces))
	for _, typ := range []string{model.SpanTypeObject, model.SpanTypeAudit, model.SpanTypeEvent, ""} {
		if byType[typ] > 0 {
			name := typ
			if name == "" {
				name = "other"
			}
			fmt.Printf(" %d %s", byType[typ], name)
		}
	}
	fmt.Println()

	size := func(n *tracetree.Node) int {
		count := 0
		var walk func(*tracetree.Node)
		walk = func(n *tracetree.Node) {
			count++
			for _, c := range n.Children {
				walk(c)
			}
		}
		walk(n)
		return count
	}
	roots := forest.Roots
	sort.SliceStable(roots, func(i, j int) bool { return size(roots[i]) > size(roots[j]) })
	if *maxRoots > 0 && len(roots) > *maxRoots {
		roots = roots[:*maxRoots]
	}
	for _, r := range roots {
		fmt.Printf("\ntrace %s (%d spans)\n", r.Span.TraceID(), size(r))
		(&tracetree.Forest{Roots: []*tracetree.Node{r}}).Print(os.Stdout, *maxChildren)
	}
}
