package main

import (
	"context"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestMain makes the test binary, re-executed by sqlite_write_lock_wait, a
// writer process as the bench binary is (main does this for it): without
// it each writer would run every comparison again, and start writers of
// its own.
func TestMain(m *testing.M) {
	if os.Getenv(lockWaitChildEnv) != "" {
		os.Exit(lockWaitChild())
	}
	if os.Getenv(uiChildEnv) != "" {
		os.Exit(uiChild())
	}
	os.Exit(m.Run())
}

// ci reports whether $CI says the tests run in CI.
func ci() bool {
	v := os.Getenv("CI")
	return v != "" && v != "false" && v != "0"
}

// TestComparisons runs every comparison on a few keys, one measured round
// each, and checks that both sides did their work and reported a
// throughput. It asserts nothing about speed. The pg_ comparisons run when
// $IDEM_TEST_PG_DSN names a database, the mysql_ ones when
// $IDEM_TEST_MYSQL_DSN does; otherwise they are skipped. The
// redis_ comparisons run on the server $IDEM_TEST_REDIS_ADDR names, else on
// a throwaway one from ../scripts/redis.sh; when none can be started they
// are skipped, except in CI (CI=true), where they fail.
func TestComparisons(t *testing.T) {
	redisServer := newRedisProvider(os.Getenv("IDEM_TEST_REDIS_ADDR"))
	t.Cleanup(redisServer.close)
	for _, c := range comparisons {
		t.Run(c.name, func(t *testing.T) {
			cfg := config{n: 5, rounds: 1, side: "both", other: c.other, idleWindow: time.Second, wakeSeconds: 2}
			if dsn := os.Getenv("IDEM_TEST_PG_DSN"); dsn != "" {
				cfg.pg = newPGProvider(dsn)
			}
			if dsn := os.Getenv("IDEM_TEST_MYSQL_DSN"); dsn != "" {
				cfg.mysql = newMySQLProvider(dsn)
			}
			cfg.redis = redisServer
			res, err := c.run(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			if res.skipped != "" {
				if strings.HasPrefix(c.name, "redis_") && ci() {
					t.Fatalf("CI requires a redis-server: %s", res.skipped)
				}
				t.Skip(res.skipped)
			}
			if c.other == "" { // a measurement: it names what it measured
				if !strings.Contains(res.text, "=") && !strings.Contains(res.text, "CPU s/hour") {
					t.Fatalf("measurement: %q", res.text)
				}
				t.Log(res.line(c))
				return
			}
			if res.idem <= 0 || res.other <= 0 {
				t.Fatalf("throughputs: idem %v, %s %v", res.idem, c.other, res.other)
			}
			if res.idemOps <= 0 || res.otherOps <= 0 {
				t.Fatalf("operations: idem %d, %s %d", res.idemOps, c.other, res.otherOps)
			}
			if res.idemCost.allocs == 0 || res.otherCost.allocs == 0 || !strings.Contains(res.line(c), "\n  per op: idem CPU") {
				t.Fatalf("per-op cost missing: idem %+v, %s %+v; line %q", res.idemCost, c.other, res.otherCost, res.line(c))
			}
			t.Log(res.line(c))
		})
	}
}

// TestCountSQL checks the statement counter on the floor of the duplicate
// comparison: one read per operation, nothing else.
func TestCountSQL(t *testing.T) {
	countSQL = true
	defer func() { countSQL = false }()
	res, err := duplicateVsFloor(context.Background(), config{n: 5, rounds: 1, side: "both", other: "floor"})
	if err != nil {
		t.Fatal(err)
	}
	if want := (countSnapshot{reads: int64(res.otherOps)}); res.otherSQL != want {
		t.Errorf("floor: counted %+v in %d operations, want %+v", res.otherSQL, res.otherOps, want)
	}
	t.Log("idem:", res.idemSQL.perOp(res.idemOps), "| floor:", res.otherSQL.perOp(res.otherOps))
}

// TestHeader: the run's header names the machine and measures its fsync
// latency (a real file under $TMPDIR, synced), the regime every durable
// comparison below it runs in.
func TestHeader(t *testing.T) {
	h := header()
	if !strings.Contains(h, runtime.GOOS+"/"+runtime.GOARCH) || !strings.Contains(h, "fsync latency in ") || !strings.Contains(h, "median ") {
		t.Fatalf("header:\n%s", h)
	}
	med, p90, err := fsyncLatency(5)
	if err != nil || med <= 0 || p90 < med {
		t.Fatalf("fsyncLatency(5) = %v, %v, %v; want 0 < median <= p90", med, p90, err)
	}
	t.Log(h)
}
