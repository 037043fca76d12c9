// Package harness is the kill -9 torture test of idem's Run protocol: the
// logic of the torture commands, which start worker processes (the command's
// own binary, re-executed), SIGKILL them at random moments, and check the
// store against the effects.
//
// The root module's command (internal/torture) runs it with the sqlite and
// statefile stores; a command in another module of this repository
// registers a store of its own ([Register]) and calls [Main], as the
// pgledger module's does for the Postgres ledger. This package imports no
// database driver, so the root module never requires one.
package harness
