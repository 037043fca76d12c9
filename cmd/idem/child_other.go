//go:build !linux

package main

import "os/exec"

// setParentDeathSignal is Linux only; elsewhere a command whose idem was
// killed runs on until it ends.
func setParentDeathSignal(*exec.Cmd) {}
