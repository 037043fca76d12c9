package statefmt

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDecoderBuildsWithoutSQLite: the package imports no database driver,
// so that scripts/test.sh's fuzz pass (FuzzDecodeState, built with coverage
// instrumentation) compiles this package and the standard library only, not
// modernc.org/sqlite (minutes on 2 cores).
func TestDecoderBuildsWithoutSQLite(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps .: %v\n%s", err, out)
	}
	for _, p := range strings.Fields(string(out)) {
		if strings.HasPrefix(p, "modernc.org/") || p == "database/sql" {
			t.Errorf("internal/statefmt depends on %s: the fuzz pass's instrumented build would compile it", p)
		}
	}
}
