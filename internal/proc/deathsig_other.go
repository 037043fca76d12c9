//go:build !linux

package proc

import "os/exec"

// DieWithParent returns false: only Linux can have a child killed when its
// parent dies. The caller must kill the child itself when it is done with
// it; a parent that is killed, or exits without doing so, leaves the child
// running.
func DieWithParent(cmd *exec.Cmd) bool { return false }
