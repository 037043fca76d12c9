//go:build unix

package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"path/filepath"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemstore"
	"github.com/idemgo/idem/limit"
	"github.com/redis/go-redis/v9"
)

// TestDetachedKeepsCapabilities: the store a run or idem serve hands to
// the engine (detachStore's wrapper of the store the flags open) has every
// idemstore interface of the store it wraps, and no other: --at-once and
// --rate make their limits in it, so it must be an idemstore.LimitStore.
func TestDetachedKeepsCapabilities(t *testing.T) {
	t.Parallel()
	check := func(t *testing.T, args ...string) {
		t.Helper()
		cmd, _, err := newRoot().Find([]string{"run"})
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.ParseFlags(args); err != nil {
			t.Fatal(err)
		}
		l, err := openLedger(context.Background(), cmd, idem.SystemClock(), true)
		if err != nil {
			t.Fatal(err)
		}
		defer l.close()
		store, err := detachStore(l.store, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := capabilities(store), capabilities(l.store); got != want {
			t.Errorf("the detached %s has the capabilities %q, want %q (those of the store it wraps)", l.desc, got, want)
		}
		if st, err := idemstore.Of(store); err != nil || st != idemstore.Store(store) {
			t.Errorf("idemstore.Of(the detached %s) = %T, %v: want the wrapper itself (the engine must call its methods)", l.desc, st, err)
		}
		if _, err := limit.NewAtOnce(store, "cli-detached", 1, time.Minute); err != nil {
			t.Errorf("an --at-once limit in the detached %s: %v", l.desc, err)
		}
		if _, err := limit.NewRate(store, "cli-detached-rate", 10, 1); err != nil {
			t.Errorf("a --rate limit in the detached %s: %v", l.desc, err)
		}
	}
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		check(t, "--ledger", filepath.Join(t.TempDir(), "ledger.db"))
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		dsn, schema := pgSchema(t, "idemcli_")
		check(t, "--postgres", dsn, "--postgres-schema", schema)
	})
	t.Run("redis", func(t *testing.T) {
		t.Parallel()
		addr := redisAddr(t)
		var b [6]byte
		_, _ = rand.Read(b[:])
		prefix := "idemcli-" + hex.EncodeToString(b[:])
		t.Cleanup(func() {
			c := redis.NewClient(&redis.Options{Addr: addr})
			defer c.Close()
			ctx := context.Background()
			keys, err := c.Keys(ctx, "{"+prefix+"}:*").Result()
			if err == nil && len(keys) > 0 {
				err = c.Del(ctx, keys...).Err()
			}
			if err != nil {
				t.Errorf("deleting the keys of %s: %v", prefix, err)
			}
		})
		check(t, "--redis", addr, "--redis-prefix", prefix)
	})
}
