package redisstore_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/idemgo/idem"
	"github.com/redis/go-redis/v9"
)

// TestRunCommands counts, on a redis-server of the test's own, what a Run
// costs the server: a fresh Run is two round trips (the claim script and
// the finish script, each one EVALSHA: no EVAL, no SCRIPT LOAD once the
// scripts are cached) and at most 13 commands inside them (the claim of a
// key with no record: HMGET, TIME, HGET of the horizon, TYPE of the two
// index sets, HINCRBY, HSET, two ZADDs; the done mark: HMGET, TIME, HSET,
// HDEL); a duplicate is one EVALSHA and one HMGET inside it.
func TestRunCommands(t *testing.T) {
	t.Parallel()
	testAddr(t) // skips (or fails in CI) without the test server, as the others
	c := startServer(t)
	ctx := context.Background()
	s := openStore(t, c)
	noop := func(context.Context) error { return nil }
	// Once, so that the scripts are cached (the first EVALSHA of each finds
	// NOSCRIPT, and go-redis sends EVAL).
	if err := s.Run(ctx, idem.Key{Job: "count", Period: "warm"}, noop); err != nil {
		t.Fatal(err)
	}
	const n = 20
	keys := make([]idem.Key, n)
	for i := range keys {
		keys[i] = idem.Key{Job: "count", Period: fmt.Sprintf("p%02d", i)}
	}

	if err := c.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if err := s.Run(ctx, k, noop); err != nil {
			t.Fatal(err)
		}
	}
	stats := commandStats(t, c)
	if stats["evalsha"] != 2*n || stats["eval"] != 0 || stats["script|load"] != 0 {
		t.Errorf("%d fresh Runs: %v; want %d EVALSHA (two round trips each), no EVAL or SCRIPT LOAD", n, stats, 2*n)
	}
	if inner := innerCommands(stats); inner > 13*n {
		t.Errorf("%d fresh Runs ran %d commands inside the scripts (%.1f each: %v); want at most 13 each", n, inner, float64(inner)/n, stats)
	}

	if err := c.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	ran := 0
	for _, k := range keys {
		if err := s.Run(ctx, k, func(context.Context) error { ran++; return nil }); err != nil {
			t.Fatal(err)
		}
	}
	stats = commandStats(t, c)
	if ran != 0 || stats["evalsha"] != n || stats["hmget"] != n || innerCommands(stats) != n {
		t.Errorf("%d duplicate Runs: %v, fn ran %d times; want one EVALSHA and one HMGET each, nothing else, fn never", n, stats, ran)
	}
}

// commandStats is INFO commandstats: calls by command name, without the
// commands that read and reset the statistics.
func commandStats(t *testing.T, c *redis.Client) map[string]int {
	t.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	stats := map[string]int{}
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		name = strings.TrimPrefix(name, "cmdstat_")
		if name == "info" || name == "config|resetstat" {
			continue
		}
		for _, f := range strings.Split(rest, ",") {
			if v, ok := strings.CutPrefix(f, "calls="); ok {
				n, err := strconv.Atoi(v)
				if err != nil {
					t.Fatalf("commandstats line %q: %v", line, err)
				}
				stats[name] = n
			}
		}
	}
	return stats
}

// innerCommands is how many of stats' calls were not the scripts' own.
func innerCommands(stats map[string]int) int {
	n := 0
	for name, calls := range stats {
		if name != "evalsha" && name != "eval" {
			n += calls
		}
	}
	return n
}
