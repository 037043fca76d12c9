package mysqlledger

import (
	"context"

	"github.com/idemgo/idem/idemstore"
)

// TurnName is the name of the named lock of key's turn to record its item
// set (RecordTurn), for tests that watch who holds or waits for it.
func (l *Ledger) TurnName(ctx context.Context, key idemstore.Key) (string, error) {
	return l.turnName(key), nil
}
