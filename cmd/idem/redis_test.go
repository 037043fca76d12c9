//go:build unix

package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"net"
	"os"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// redisAddr is the test redis-server's address ($IDEM_TEST_REDIS_ADDR:
// scripts/test.sh starts one with scripts/redis.sh); without it the test
// is skipped, except in CI.
func redisAddr(t *testing.T) string {
	t.Helper()
	addr := os.Getenv("IDEM_TEST_REDIS_ADDR")
	if addr == "" {
		if v := os.Getenv("CI"); v != "" && v != "false" && v != "0" {
			t.Fatal("IDEM_TEST_REDIS_ADDR is not set, and CI must run the Redis tests: run scripts/test.sh")
		}
		t.Skip("no Redis: set IDEM_TEST_REDIS_ADDR (eval \"$(scripts/redis.sh start)\" from the repository's root)")
	}
	return addr
}

// TestRedisStoreCLI: --redis ADDR (or $IDEM_REDIS, host:port or a
// redis:// URL) puts the ledger in the Redis store for run, ls, show,
// resolve and prune, under --redis-prefix; the outbox commands and doctor refuse it
// with a clear error, as does an unreachable server or two stores named at
// once.
func TestRedisStoreCLI(t *testing.T) {
	t.Parallel()
	addr := redisAddr(t)
	var b [6]byte
	_, _ = rand.Read(b[:])
	prefix := "idemcli-" + hex.EncodeToString(b[:])
	c := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() {
		ctx := context.Background()
		keys, err := c.Keys(ctx, "{"+prefix+"}:*").Result()
		if err == nil && len(keys) > 0 {
			err = c.Del(ctx, keys...).Err()
		}
		if err != nil {
			t.Errorf("deleting the keys of %s: %v", prefix, err)
		}
		_ = c.Close()
	})

	e := newEnv(t, "2026-10-28T02:00:00Z")
	e.pg = []string{"--redis", addr, "--redis-prefix", prefix}
	e.want(exitOK, runArgs()...)
	e.want(exitDone, runArgs()...)
	if got, want := e.lines("out.txt"), []string{"2026-10-27 1"}; !equal(got, want) {
		t.Fatalf("out.txt = %q, want %q", got, want)
	}
	if _, err := os.Stat(e.ledger); !os.IsNotExist(err) {
		t.Fatalf("a SQLite ledger was created at %s with --redis: %v", e.ledger, err)
	}
	if n, err := c.Exists(context.Background(), "{"+prefix+"}:run:6:settle:2026-10-27").Result(); err != nil || n != 1 {
		t.Fatalf("the period's record in Redis: %d, %v; want it there", n, err)
	}
	if out, _ := e.want(exitOK, "ls"); !strings.Contains(out, "settle") || !strings.Contains(out, "2026-10-27") || !strings.Contains(out, "done") {
		t.Fatalf("ls --redis:\n%s", out)
	}
	if out, _ := e.want(exitOK, "show", "settle", "2026-10-27"); !strings.Contains(out, "done") {
		t.Fatalf("show --redis:\n%s", out)
	}
	// run-now leaves a wake mark (the Schedulers run the period at once).
	e.want(exitOK, "run-now", "report", "2026-10-27")
	if score, err := c.ZScore(context.Background(), "{"+prefix+"}:wakes", "report").Result(); err != nil || score < 1 {
		t.Fatalf("the wake mark of report after run-now: %v, %v; want one", score, err)
	}
	// An at-most-once attempt that failed is unknown; resolve --retry lets
	// it run again, through $IDEM_REDIS (a redis:// URL) this time.
	e.want(exitUnknown, "run", "--job", "pay", "--tz", "UTC", "--mode", "at-most-once", "--", "sh", "-c", `echo "pay $IDEM_ATTEMPT" >> out.txt; exit 1`)
	if _, stderr := e.want(exitUnknown, "run", "--job", "pay", "--tz", "UTC", "--mode", "at-most-once", "--", "true"); !strings.Contains(stderr, "--redis ADDR") {
		t.Errorf("the unknown period's advice does not repeat --redis: %q", stderr)
	}
	e.want(exitOK, "resolve", "pay", "2026-10-27", "--retry")
	cmd := e.command("run", "--redis-prefix", prefix, "--job", "pay", "--tz", "UTC", "--mode", "at-most-once", "--",
		"sh", "-c", `echo "pay $IDEM_ATTEMPT" >> out.txt`)
	cmd.Env = append(cmd.Env, EnvRedis+"=redis://"+addr)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("run with $%s: %v\n%s", EnvRedis, err, out)
	}
	if got, want := e.lines("out.txt"), []string{"2026-10-27 1", "pay 1", "pay 2"}; !equal(got, want) {
		t.Fatalf("out.txt = %q, want %q", got, want)
	}
	// prune deletes the done record; the period stays done (the horizon).
	e.want(exitOK, "prune", "--job", "settle", "--through", "2026-10-27")
	if n, err := c.Exists(context.Background(), "{"+prefix+"}:run:6:settle:2026-10-27").Result(); err != nil || n != 0 {
		t.Fatalf("the pruned record in Redis: %d, %v; want it gone", n, err)
	}
	e.want(exitDone, runArgs()...)
	// Another prefix is another store.
	if _, stderr := e.want(exitOK, "ls", "--redis-prefix", prefix+"-other"); !strings.Contains(stderr, "no") {
		t.Errorf("ls of an empty store: %q", stderr)
	}

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"outbox", "ls", "--redis", addr, "--redis-prefix", prefix}, "no outbox"},
		{[]string{"doctor", "--redis", addr}, "SQLite"},
		{[]string{"ls", "--redis", "127.0.0.1:1"}, "127.0.0.1:1"},
		{[]string{"ls", "--redis", addr, "--ledger", e.ledger}, "redis"},
	} {
		e2 := newEnv(t, "")
		cmd := e2.command(c.args...)
		out, err := cmd.CombinedOutput()
		if code := cmd.ProcessState.ExitCode(); code != exitUsage || !strings.Contains(string(out), c.want) {
			t.Errorf("idem %s: exit %d (%v), want %d and an error naming %q:\n%s", strings.Join(c.args, " "), code, err, exitUsage, c.want, out)
		}
	}
	cmd = e.command("ls")
	cmd.Env = append(cmd.Env, EnvRedis+"="+addr, EnvPostgres+"=postgres://localhost/x")
	if out, _ := cmd.CombinedOutput(); cmd.ProcessState.ExitCode() != exitUsage || !strings.Contains(string(out), "$"+EnvRedis) {
		t.Errorf("ls with $%s and $%s set: exit %d:\n%s", EnvPostgres, EnvRedis, cmd.ProcessState.ExitCode(), out)
	}
}

// TestRedisClosedPortSaysOnce: --redis at a port where nothing listens
// prints idem's error and nothing of go-redis's own log (it printed eight
// "redis: ... dial tcp ... connection refused" lines first). No server is
// needed.
func TestRedisClosedPortSaysOnce(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // a port nothing listens on
	e := newEnv(t, "")
	cmd := e.command("ls", "--redis", addr)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	_ = e.finish(cmd, &stderr)
	if code := cmd.ProcessState.ExitCode(); code != exitUsage || !strings.HasPrefix(stderr.String(), "idem: ") || !strings.Contains(stderr.String(), addr) {
		t.Fatalf("idem ls --redis %s: exit %d, want %d and idem's error naming the address:\n%s%s", addr, code, exitUsage, stdout.String(), stderr.String())
	}
	for _, line := range strings.Split(strings.TrimSpace(stderr.String()), "\n") {
		if !strings.HasPrefix(line, "idem: ") && !strings.HasPrefix(line, "Run 'idem help'") {
			t.Errorf("a line that is not idem's: %q\n%s", line, stderr.String())
		}
	}
}
