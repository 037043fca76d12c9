//go:build !linux

package holder

// localScope: outside Linux idem cannot prove a process dead, so owners
// carry no scope and HolderGone is always false.
func localScope() (scope, bool) { return scope{}, false }

func processGone(pid int, start uint64) bool { return false }
