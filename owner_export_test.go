package idem

import "sync"

// SetHostnameForTest makes this process name host in its owner, as a
// process on another host would. Call it before the process's first claim.
func SetHostnameForTest(host string) {
	hostname = func() (string, error) { return host, nil }
	ownerOnce = sync.Once{}
}

// ProcessOwner is this process's owner, as its claims record it.
var ProcessOwner = processOwner
