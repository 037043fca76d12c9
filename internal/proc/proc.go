// Package proc kills processes as the crash tests need on every system: at
// once, with no chance to run deferred code or flush buffers, and so that
// the parent can tell a killed child from one that exited.
//
// On Unix a kill is SIGKILL. Windows has no signals: a kill is
// TerminateProcess with exit code [KilledExitCode], and a child that exits
// with that code by itself is taken for killed.
package proc

// KilledExitCode is the exit code of a process killed by [Kill] or
// [KillSelf] on Windows: 128 + 9, what a shell reports for SIGKILL.
const KilledExitCode = 137
