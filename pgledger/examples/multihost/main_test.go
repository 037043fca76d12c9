package main

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/idemgo/idem/internal/testwait"
)

func TestMain(m *testing.M) {
	if w := os.Getenv(workerEnv); w != "" {
		// The demo re-executes this binary as its workers.
		if err := worker(context.Background(), os.Getenv(dsnEnv), w, os.Stdout); err != nil {
			os.Stderr.WriteString("worker: " + err.Error() + "\n")
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func TestDemo(t *testing.T) {
	dsn := os.Getenv(dsnEnv)
	if dsn == "" {
		if ci := os.Getenv("CI"); ci != "" && ci != "false" && ci != "0" {
			t.Fatalf("%s is not set, and CI must run the Postgres tests: run scripts/test.sh (it starts PostgreSQL with scripts/pg.sh)", dsnEnv)
		}
		t.Skipf("no PostgreSQL: run scripts/test.sh (it starts a throwaway server), or set %s=postgres://...", dsnEnv)
	}
	var out strings.Builder
	ctx, cancel := context.WithTimeout(context.Background(), testwait.Limit(t))
	defer cancel()
	if err := demo(ctx, dsn, &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	t.Log("\n" + out.String())
	for _, w := range []string{"worker A", "worker B", "exactly once"} {
		if !strings.Contains(out.String(), w) {
			t.Fatalf("output lacks %q:\n%s", w, out.String())
		}
	}
}
