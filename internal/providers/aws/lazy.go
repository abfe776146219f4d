package aws

import (
	"regexp"
	"sync"
)

// lazyRE compiles a pattern the first time it is used, not when the
// binary starts: every command of fleet-agent links this adapter, and only
// the ones that use it should pay for its patterns.
func lazyRE(expr string) func() *regexp.Regexp {
	return sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(expr) })
}
