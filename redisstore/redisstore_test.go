package redisstore_test

import (
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemtest"
	"github.com/idemgo/idem/redisstore"
	"github.com/redis/go-redis/v9"
)

// TestConformance runs idem's store conformance suite. The server's clock
// cannot be faked, so time passes by moving every stored time back: the
// suite calls Shift whenever its fake clock moves, including the moves an
// auto-advancing clock makes in the engine's sleeps.
func TestConformance(t *testing.T) {
	t.Parallel()
	idemtest.TestStore(t, harness(newClient(t)))
}

// harness opens stores with fresh prefixes on c for idemtest's kits.
func harness(c *redis.Client) idemtest.Harness {
	return idemtest.Harness{
		Open: func(t *testing.T, clk idem.Clock) idem.Store {
			return openStore(t, c, redisstore.WithRunOptions(idem.WithClock(clk)))
		},
		LeaseExpiry: true,
		Shift: func(t *testing.T, s idem.Store, d time.Duration) {
			if err := shiftTimes(s.(*redisstore.Store), d); err != nil {
				t.Errorf("shift: %v", err) // maybe not on the test's goroutine: no Fatal
			}
		},
	}
}
