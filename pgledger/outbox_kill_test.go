package pgledger_test

import (
	"testing"

	"github.com/idemgo/idem/idemtest"
)

// TestOutboxRelayKilledMidDelivery is idemtest's kit of that name on
// Postgres, the root package's twin: a relay process is SIGKILLed while the
// receiver holds one of its webhook requests; after the restart (the dead
// relay's leases expired on the server's clock) every message arrives, the
// interrupted one again with the same Idempotency-Key, each topic in order.
func TestOutboxRelayKilledMidDelivery(t *testing.T) {
	testDSN(t)
	idemtest.TestRelayKilledMidDelivery(t, pgKillHarness())
}
