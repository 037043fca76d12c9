package mysqlledger

import (
	"context"

	"github.com/idemgo/idem/idemstore"
)

// TurnName is the name of the named lock of key's turn to record its item
// set (RecordTurn), for tests that watch who holds or waits for it.
func (l *Ledger) TurnName(ctx context.Context, key idemstore.Key) (string, error) {
	c, err := l.db.Conn(ctx)
	if err != nil {
		return "", err
	}
	defer c.Close()
	return l.turnName(ctx, c, key)
}
