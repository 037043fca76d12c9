package redisstore_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemstore"
	"github.com/idemgo/idem/idemtest"
	"github.com/idemgo/idem/internal/holder"
	"github.com/idemgo/idem/redisstore"
	"github.com/redis/go-redis/v9"
)

// TestLimits runs idemtest's conformance suite of idemstore.LimitStore.
func TestLimits(t *testing.T) {
	t.Parallel()
	c := newClient(t)
	idemtest.TestLimits(t, func(t *testing.T) idem.Store { return openStore(t, c) })
}

// TestSharedLimits runs package limit's limits in three processes on one
// store: New makes a fresh prefix (its keys deleted when the test ends)
// and returns "prefix|address".
func TestSharedLimits(t *testing.T) {
	idemtest.TestSharedLimits(t, idemtest.LimitHarness{
		New: func(t *testing.T) string {
			if idemtest.IsChild(t) {
				return "" // the child is told where by its parent: create nothing here
			}
			s := openStore(t, newClient(t))
			return s.Prefix() + "|" + testAddr(t)
		},
		Open: func(t *testing.T, where string) idem.Store {
			prefix, addr, ok := strings.Cut(where, "|")
			if !ok {
				t.Fatalf("limit harness: %q is not prefix|address", where)
			}
			c := redis.NewClient(&redis.Options{Addr: addr, ReadTimeout: testClientTimeout, WriteTimeout: testClientTimeout})
			t.Cleanup(func() { _ = c.Close() })
			s, err := redisstore.New(context.Background(), c, redisstore.WithPrefix(prefix))
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
	})
}

// TestSlotTakeOverNamesTheToken: the second run of AcquireSlot, which
// names a place whose holder the client found gone, takes it only if the
// token the client saw there still holds it: a place that changed hands
// between the two runs (released, and taken by a live holder) stays with
// its new holder.
func TestSlotTakeOverNamesTheToken(t *testing.T) {
	t.Parallel()
	dead := holder.EndedForTest()
	if dead == "" {
		t.Skip("this system cannot tell that a process has ended (idemstore.HolderGone)")
	}
	s := openStore(t, newClient(t))
	ctx := context.Background()
	old := idemstore.SlotHolder{Owner: dead, Token: "dead"}
	if n, ok, _, err := s.AcquireSlot(ctx, "g", 1, old, time.Hour); err != nil || !ok || n != 0 {
		t.Fatalf("acquire: place %d, ok %v, %v", n, ok, err)
	}
	// The client saw (0, "dead") and found its owner gone; meanwhile the
	// place changed hands.
	if err := s.ReleaseSlot(ctx, "g", 0, old); err != nil {
		t.Fatal(err)
	}
	live := idemstore.SlotHolder{Owner: idemstore.Owner(), Token: "live"}
	if n, ok, _, err := s.AcquireSlot(ctx, "g", 1, live, time.Hour); err != nil || !ok || n != 0 {
		t.Fatalf("acquire by a live holder: place %d, ok %v, %v", n, ok, err)
	}
	late := idemstore.SlotHolder{Owner: idemstore.Owner(), Token: "late"}
	v, err := redisstore.AcquireSlotNaming(ctx, s, "g", 1, late, time.Hour, "0", "dead")
	if err != nil || len(v) < 2 || v[0] != int64(0) {
		t.Fatalf("take-over naming the token seen before the place changed hands: %v, %v; want refused", v, err)
	}
	if held, err := s.RenewSlot(ctx, "g", 0, live, time.Hour); err != nil || !held {
		t.Fatalf("the new holder renews: held %v, %v", held, err)
	}
	// Naming the token that holds it, the script takes it (the client
	// vouches that its holder is gone).
	if v, err := redisstore.AcquireSlotNaming(ctx, s, "g", 1, late, time.Hour, "0", "live"); err != nil || len(v) != 2 || v[0] != int64(1) || v[1] != int64(0) {
		t.Fatalf("take-over naming the token that holds the place: %v, %v; want place 0", v, err)
	}
}

// TestAcquireSlotSentAgain: an AcquireSlot sent again by the same holder
// (go-redis re-sends a command whose reply was lost) answers the place it
// took and takes no second one.
func TestAcquireSlotSentAgain(t *testing.T) {
	t.Parallel()
	s := openStore(t, newClient(t))
	ctx := context.Background()
	h := idemstore.SlotHolder{Owner: idemstore.Owner(), Token: "t1"}
	for i := range 2 {
		if n, ok, _, err := s.AcquireSlot(ctx, "x", 2, h, time.Hour); err != nil || !ok || n != 0 {
			t.Fatalf("acquire %d of one holder: place %d, ok %v, %v; want place 0", i+1, n, ok, err)
		}
	}
	if n, ok, _, err := s.AcquireSlot(ctx, "x", 2, idemstore.SlotHolder{Owner: idemstore.Owner(), Token: "t2"}, time.Hour); err != nil || !ok || n != 1 {
		t.Fatalf("another holder: place %d, ok %v, %v; want place 1 (one place held of 2)", n, ok, err)
	}
}

// BenchmarkTakeRate measures a take of a rate limit that never waits (one
// script).
func BenchmarkTakeRate(b *testing.B) {
	s := openStore(b, newClient(b))
	ctx := context.Background()
	r := idemstore.Rate{PerSecond: 1e9, Burst: 1 << 30}
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, ok, err := s.TakeRate(ctx, "bench", r, 1, time.Second); err != nil || !ok {
				b.Errorf("take: %v, %v", ok, err)
				return
			}
		}
	})
}
