package pgledger

import (
	"context"
	"fmt"

	"github.com/idemgo/idem/idemstore"
)

var (
	_ idemstore.OutboxReleaser = (*Ledger)(nil)
	_ idemstore.OutboxReleaser = (*DBLedger)(nil)
)

// outboxReleaseSQL gives one claim back if it is still the message's
// latest: its lease released and its attempt count back.
const outboxReleaseSQL = `UPDATE {s}.outbox SET attempts = attempts - 1, lease_until = 0
	WHERE id = $1 AND token = $2 AND status = 'pending'`

// ReleaseOutbox implements [idemstore.OutboxReleaser]: in one transaction
// (one round trip with a pgx pool), each claim still the message's latest
// gets its lease released and its attempt count back, as if it had never
// been taken; the others are left as they are. A relay gives back so the
// messages it claimed and did not hand out when it stops. ClaimOutbox
// takes the first pending message of each topic only (it ignores
// [idemstore.OutboxClaimRequest.Run]).
func (l *core) ReleaseOutbox(ctx context.Context, claims []idemstore.OutboxClaimed) error {
	if len(claims) == 0 {
		return nil
	}
	q := l.oq(outboxReleaseSQL)
	stmts := make([]stmt, len(claims))
	for i, c := range claims {
		stmts[i] = stmt{query: q, args: []any{c.ID, c.Token}}
	}
	if _, err := l.db.batch(ctx, stmts); err != nil {
		return fmt.Errorf("pgledger: schema %q: release outbox claims: %w", l.schema, err)
	}
	return nil
}
