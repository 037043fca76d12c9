package testledger

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemstore"
)

// Store is what the SQLite ledger's store implements ([idemstore.Of] of
// an *idem.Ledger): the methods tests call to drive the protocol by hand.
type Store interface {
	idemstore.FreshTxStore[*sql.Tx]
	idemstore.CatchUpTxStore[*sql.Tx]
	idemstore.ItemTxStore[*sql.Tx]
	idemstore.OutboxTxStore[*sql.Tx]
	idemstore.OutboxReleaser
	idemstore.Lister
}

// StateStore is what the state file's store implements.
type StateStore interface {
	idemstore.CatchUpStore
	idemstore.Lister
	idemstore.Releaser
}

// SPI is the store behind the ledger l.
func SPI(t testing.TB, l *idem.Ledger) Store { t.Helper(); return As[Store](t, l) }

// StateSPI is the store behind the state file s.
func StateSPI(t testing.TB, s *idem.StateFile) StateStore { t.Helper(); return As[StateStore](t, s) }

// As is the store behind s as a T; t fails at once if it is none.
func As[T any](t testing.TB, s any) T {
	t.Helper()
	st, err := idemstore.Of(s)
	if err != nil {
		t.Fatal(err)
	}
	v, ok := st.(T)
	if !ok {
		t.Fatalf("the store behind %T (%T) is not a %T", s, st, (*T)(nil))
	}
	return v
}

// ClaimAll claims, at now, every item of key a claim can take (N of them
// at a time, as owner "test", for a minute) and returns them: what a call
// left claimable at once.
func ClaimAll(t testing.TB, s idemstore.ItemStore, key idem.Key, now time.Time) []idemstore.ItemClaim {
	t.Helper()
	var all []idemstore.ItemClaim
	for {
		b, err := s.ClaimItems(context.Background(), key, idemstore.ItemClaimRequest{N: 100, Owner: "test", Now: now, Lease: time.Minute})
		if err != nil {
			t.Fatalf("ClaimItems: %v", err)
		}
		if len(b.Items) == 0 {
			return all
		}
		all = append(all, b.Items...)
	}
}
