// Package pgtest holds what the pgledger module's tests share with its
// tests of other database/sql drivers and libraries (pgledger/compattest, a
// module of its own): the test database, ledgers in throwaway schemas, the
// database's clock moved by hand, and the conformance kits' harnesses. It
// is internal: no user of the module imports it.
package pgtest

import (
	"os"
	"testing"
)

// DSNEnv names the variable that names the real PostgreSQL the tests run
// against; scripts/test.sh starts a throwaway one (scripts/pg.sh) and sets
// it.
const DSNEnv = "IDEM_TEST_PG_DSN"

// DSN returns the test database's DSN. Without one the test is skipped,
// except in CI, where the Postgres tests must run.
func DSN(t testing.TB) string {
	t.Helper()
	dsn := os.Getenv(DSNEnv)
	if dsn == "" {
		if inCI() {
			t.Fatalf("%s is not set, and CI must run the Postgres tests: run scripts/test.sh (it starts PostgreSQL with scripts/pg.sh)", DSNEnv)
		}
		t.Skipf("no PostgreSQL: run scripts/test.sh (it starts a throwaway server), or set %s=postgres://...", DSNEnv)
	}
	return dsn
}

// inCI reports whether $CI is set (to anything but false or 0).
func inCI() bool {
	v := os.Getenv("CI")
	return v != "" && v != "false" && v != "0"
}
