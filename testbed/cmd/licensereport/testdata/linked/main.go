// Command linked is a real binary for the licence report's tests to read: it links the standard
// library, goleak (MIT), pflag (BSD-3-Clause) and this repository's module.
package main

import (
	"fmt"

	"github.com/kubetrail/kubetrail/internal/objid"
	"github.com/spf13/pflag"
	"go.uber.org/goleak"
)

func main() {
	fmt.Println(pflag.ErrHelp, goleak.IgnoreCurrent() != nil, objid.UIDKey("cluster", "uid"))
}
