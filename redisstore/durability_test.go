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

// TestWeakFsyncRefused: against a server with appendfsync everysec or no,
// New refuses with ErrWeakDurability, naming the policy, and writes
// nothing; with AllowWeakDurability it opens and runs.
func TestWeakFsyncRefused(t *testing.T) {
	t.Parallel()
	testAddr(t) // skips (or fails in CI) without the test server, as the others
	ctx := context.Background()
	for _, policy := range []string{"everysec", "no"} {
		t.Run(policy, func(t *testing.T) {
			t.Parallel()
			// A server of the test's own: the shared one keeps appendfsync
			// always for the tests and torture runs beside this one.
			c := startServer(t, "--appendfsync", policy)
			_, err := redisstore.New(ctx, c)
			if !errors.Is(err, redisstore.ErrWeakDurability) || !strings.Contains(err.Error(), "appendfsync "+policy) ||
				!strings.Contains(err.Error(), "AllowWeakDurability") {
				t.Fatalf("New with appendfsync %s: %v; want ErrWeakDurability naming the policy and the option", policy, err)
			}
			if n, err := c.DBSize(ctx).Result(); err != nil || n != 0 {
				t.Fatalf("keys after the refusal: %d, %v; want none", n, err)
			}
			s, err := redisstore.New(ctx, c, redisstore.AllowWeakDurability())
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
	// With appendfsync always (as scripts/redis.sh starts the shared
	// server) New opens without the option.
	t.Run("always", func(t *testing.T) {
		t.Parallel()
		if _, err := redisstore.New(ctx, startServer(t)); err != nil {
			t.Fatalf("New with appendfsync always: %v", err)
		}
	})
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
