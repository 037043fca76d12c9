//go:build !linux

package hostsys

import (
	"context"
	"os"
	"os/exec"
)

// Locks reports whether Lock takes a lock on this system.
const Locks = false

// SetParentDeathSignal does nothing on this system.
func SetParentDeathSignal(*exec.Cmd) {}

// Lock takes no lock on this system: nil, nil.
func Lock(context.Context, string, func(holder string)) (*os.File, error) { return nil, nil }

// Statfs cannot tell on this system.
func Statfs(string) (FS, error) { return FS{}, ErrUnsupported }

// Writable cannot tell on this system.
func Writable(string) error { return ErrUnsupported }
