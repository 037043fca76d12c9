package redisstore_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/redisstore"
	"github.com/redis/go-redis/v9"
)

// setFsync sets the server's appendfsync to policy until t ends. The test
// that calls it must not be parallel: Go runs it before every parallel
// test of the package starts, so no other store opens meanwhile.
func setFsync(t *testing.T, c *redis.Client, policy string) {
	t.Helper()
	ctx := context.Background()
	was, err := c.ConfigGet(ctx, "appendfsync").Result()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.ConfigSet(ctx, "appendfsync", policy).Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.ConfigSet(context.Background(), "appendfsync", was["appendfsync"]).Err(); err != nil {
			t.Errorf("restore appendfsync %s: %v", was["appendfsync"], err)
		}
	})
}

// TestWeakFsyncRefused: against a server with appendfsync everysec or no,
// New refuses with ErrWeakDurability, naming the policy, and writes
// nothing; with AllowWeakDurability it opens and runs.
func TestWeakFsyncRefused(t *testing.T) {
	c := newClient(t)
	ctx := context.Background()
	for _, policy := range []string{"everysec", "no"} {
		t.Run(policy, func(t *testing.T) {
			setFsync(t, c, policy)
			prefix := uniquePrefix()
			deleteLater(t, c, prefix)
			_, err := redisstore.New(ctx, c, redisstore.WithPrefix(prefix))
			if !errors.Is(err, redisstore.ErrWeakDurability) || !strings.Contains(err.Error(), "appendfsync "+policy) ||
				!strings.Contains(err.Error(), "AllowWeakDurability") {
				t.Fatalf("New with appendfsync %s: %v; want ErrWeakDurability naming the policy and the option", policy, err)
			}
			if n, err := c.Keys(ctx, "{"+prefix+"}:*").Result(); err != nil || len(n) != 0 {
				t.Fatalf("keys after the refusal: %v, %v; want none", n, err)
			}
			s, err := redisstore.New(ctx, c, redisstore.WithPrefix(prefix), redisstore.AllowWeakDurability())
			if err != nil {
				t.Fatalf("New with AllowWeakDurability: %v", err)
			}
			k := idem.Key{Job: "weak", Period: "2026-10-27"}
			ran := 0
			for range 2 {
				if err := s.Run(ctx, k, func(context.Context) error { ran++; return nil }); err != nil {
					t.Fatal(err)
				}
			}
			if ran != 1 {
				t.Fatalf("fn ran %d times, want 1", ran)
			}
		})
	}
	// With appendfsync always (the server as scripts/redis.sh starts it)
	// New opens without the option.
	prefix := uniquePrefix()
	deleteLater(t, c, prefix)
	if _, err := redisstore.New(ctx, c, redisstore.WithPrefix(prefix)); err != nil {
		t.Fatalf("New with appendfsync always: %v", err)
	}
}

// TestNewerLayoutRefused: a store whose layout version is newer than this
// package's is refused with idem.ErrNewerSchema, and left untouched.
func TestNewerLayoutRefused(t *testing.T) {
	t.Parallel()
	c := newClient(t)
	ctx := context.Background()
	prefix := uniquePrefix()
	deleteLater(t, c, prefix)
	if err := c.HSet(ctx, "{"+prefix+"}:meta", "version", redisstore.LayoutVersion+1).Err(); err != nil {
		t.Fatal(err)
	}
	_, err := redisstore.New(ctx, c, redisstore.WithPrefix(prefix))
	if !errors.Is(err, idem.ErrNewerSchema) || !strings.Contains(err.Error(), prefix) {
		t.Fatalf("New on a newer layout: %v; want ErrNewerSchema naming the store", err)
	}
	if v, err := c.HGet(ctx, "{"+prefix+"}:meta", "version").Int(); err != nil || v != redisstore.LayoutVersion+1 {
		t.Fatalf("layout version after the refusal: %d, %v", v, err)
	}
}

// TestUnreachableIsNotWeak: a server that cannot be reached is an error of
// its own, not ErrWeakDurability (which would send the caller to
// AllowWeakDurability for nothing), with or without the option.
func TestUnreachableIsNotWeak(t *testing.T) {
	t.Parallel()
	testAddr(t)
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	for _, opts := range [][]redisstore.Option{nil, {redisstore.AllowWeakDurability()}} {
		_, err := redisstore.New(context.Background(), c, opts...)
		if err == nil || errors.Is(err, redisstore.ErrWeakDurability) || !strings.Contains(err.Error(), "127.0.0.1:1") {
			t.Fatalf("New on 127.0.0.1:1 (%d options): %v; want a connection error naming the address, not ErrWeakDurability", len(opts), err)
		}
	}
}
