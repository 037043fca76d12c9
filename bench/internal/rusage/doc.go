// Package rusage is what the benchmarks read of getrusage: this process's
// CPU time and an ended child's peak resident set. It holds every file of
// the bench module that builds for some systems only, so that
// scripts/test.sh type-checks the module's system-specific code for darwin
// and windows by vetting this package alone, without compiling River,
// asynq and the stores' clients for those systems.
package rusage
