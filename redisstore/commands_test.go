package redisstore_test

import (
	"context"
	"errors"
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
// HDEL); a duplicate is one EVALSHA and one HMGET inside it, or, once
// most of the store's recent claims found their key done, one HMGET and
// no script.
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

	// Duplicates: the first ones by the claim script alone (one EVALSHA,
	// one HMGET inside it); once most recent claims found their key done,
	// by one plain HMGET each, and no script.
	ran := 0
	dup := func() {
		t.Helper()
		for _, k := range keys {
			if err := s.Run(ctx, k, func(context.Context) error { ran++; return nil }); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := c.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	dup()
	stats = commandStats(t, c)
	if ran != 0 || stats["hmget"] != n || stats["evalsha"] > n/2 || innerCommands(stats) != n {
		t.Errorf("%d duplicate Runs after fresh ones: %v, fn ran %d times; want one round trip each: the script (one HMGET inside) for the first few, then one HMGET alone", n, stats, ran)
	}
	if err := c.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	dup()
	stats = commandStats(t, c)
	if ran != 0 || stats["hmget"] != n || len(stats) != 1 {
		t.Errorf("%d duplicate Runs after duplicates: %v, fn ran %d times; want one HMGET each and nothing else, fn never", n, stats, ran)
	}

	// Fresh keys again: a claim or two read the record first, until the
	// claims that find fresh keys bring the script back alone.
	if err := c.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	for i := range keys {
		if err := s.Run(ctx, idem.Key{Job: "count", Period: fmt.Sprintf("q%02d", i)}, noop); err != nil {
			t.Fatal(err)
		}
	}
	stats = commandStats(t, c)
	if stats["evalsha"] != 2*n || innerCommands(stats) > 13*n+2 {
		t.Errorf("%d fresh Runs after duplicates: %v; want %d EVALSHA and at most two reads more than after fresh Runs", n, stats, 2*n)
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

// TestProbedClaimAnswers: once the store's claims read the record before
// the script (most recent claims found their key done), a done key still
// gives its stored value, a call with other params still fails with
// ErrParamsMismatch without running fn, a key that is not done still goes
// to the script (a failed key backs off; a new key runs), and a record of
// the wrong type is still refused naming the key.
func TestProbedClaimAnswers(t *testing.T) {
	t.Parallel()
	c := newClient(t)
	ctx := context.Background()
	s := openStore(t, c)
	done := idem.Key{Job: "probe", Period: "done"}
	v, err := idem.RunValueOn(ctx, s, done, func(context.Context) (int, error) { return 42, nil }, idem.WithParams("a"))
	if err != nil || v != 42 {
		t.Fatalf("first RunValue: %d, %v", v, err)
	}
	failed := idem.Key{Job: "probe", Period: "failed"}
	if err := s.Run(ctx, failed, func(context.Context) error { return errors.New("fails") }, idem.RetryWithin(0)); !errors.Is(err, idem.ErrBackingOff) {
		t.Fatalf("failing Run: %v; want ErrBackingOff", err)
	}
	ran := 0
	fn := func(context.Context) (int, error) { ran++; return 7, nil }
	for range 16 { // the claims now read the record first
		if v, err := idem.RunValueOn(ctx, s, done, fn, idem.WithParams("a")); err != nil || v != 42 {
			t.Fatalf("duplicate RunValue: %d, %v; want the stored 42", v, err)
		}
	}
	var res idem.Result
	if v, err := idem.RunValueOn(ctx, s, done, fn, idem.WithParams("a"), idem.ReportTo(&res)); err != nil || v != 42 || res.Outcome != idem.AlreadyDone {
		t.Fatalf("duplicate RunValue: %d, %v, outcome %v; want the stored 42, AlreadyDone", v, err, res.Outcome)
	}
	if _, err := idem.RunValueOn(ctx, s, done, fn, idem.WithParams("b")); !errors.Is(err, idem.ErrParamsMismatch) {
		t.Fatalf("RunValue with other params: %v; want ErrParamsMismatch", err)
	}
	if err := s.Run(ctx, failed, func(context.Context) error { ran++; return nil }); !errors.Is(err, idem.ErrBackingOff) {
		t.Fatalf("Run of the failed key: %v; want ErrBackingOff", err)
	}
	badKey := "{" + s.Prefix() + "}:run:5:probe:wrong"
	if err := c.Set(ctx, badKey, "not a hash", 0).Err(); err != nil {
		t.Fatal(err)
	}
	err = s.Run(ctx, idem.Key{Job: "probe", Period: "wrong"}, func(context.Context) error { ran++; return nil })
	if err == nil || !strings.Contains(err.Error(), "WRONGTYPE") || !strings.Contains(err.Error(), badKey) {
		t.Fatalf("Run of a key whose record is a string: %v; want a WRONGTYPE error naming %s", err, badKey)
	}
	if ran != 0 {
		t.Fatalf("fn ran %d times; want never", ran)
	}
	if v, err := idem.RunValueOn(ctx, s, idem.Key{Job: "probe", Period: "new"}, fn); err != nil || v != 7 || ran != 1 {
		t.Fatalf("RunValue of a new key: %d, %v, fn ran %d times; want 7, nil, once", v, err, ran)
	}
}
