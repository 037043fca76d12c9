package idemstore

import (
	"fmt"

	"github.com/idemgo/idem/internal/storeof"
)

// Of returns the Store behind s, a store as package idem's calls take it
// (idem.Store): for idem.Ledger and idem.StateFile, whose methods for this
// package are not among the methods they show their users, the value that
// implements them; for any other s that implements Store, s itself. A
// wrapper of a store (a store of your own that adds to one of idem's) gets
// the store it wraps from Of.
//
// The interfaces beyond Store that the result implements are the
// capabilities of the store: idem.Ledger's is a FreshTxStore, a
// CatchUpTxStore, an ItemTxStore and an OutboxTxStore of *sql.Tx, and a
// Lister; idem.StateFile's, a CatchUpStore, a Lister and a Releaser.
//
// An s that is no store is an error naming its type.
func Of(s any) (Store, error) {
	if w, ok := s.(storeof.Wrapper); ok {
		s = w.StoreBehind()
	}
	if st, ok := s.(Store); ok && st != nil {
		return st, nil
	}
	return nil, fmt.Errorf("idemstore: %s is not a store: it does not implement idemstore.Store (Claim, Renew, Finish, Resolve, Lookup)", storeof.TypeName(s))
}
