//go:build !linux

package hostsys

import (
	"context"
	"os"
	"os/exec"
)

// Locks reports whether Lock takes a lock on this system.
const Locks = false

// SetParentDeathSignal does nothing on this system: a command whose idem
// was killed runs on until it ends.
func SetParentDeathSignal(*exec.Cmd) {}

// Lock takes no lock on this system: nil, nil. As taking a killed run over
// at once (idemstore.HolderGone) is linux only too, a killed run's period
// waits out its lease here instead.
func Lock(context.Context, string, func(holder string)) (*os.File, error) { return nil, nil }

// Statfs cannot tell on this system.
func Statfs(string) (FS, error) { return FS{}, ErrUnsupported }

// Writable cannot tell on this system.
func Writable(string) error { return ErrUnsupported }
