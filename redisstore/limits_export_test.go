package redisstore

import (
	"context"
	"time"

	"github.com/idemgo/idem/idemstore"
)

// AcquireSlotNaming runs the script of AcquireSlot once, naming places
// whose holders the caller found gone and the tokens it saw there (pairs
// of place and token), as AcquireSlot's second run does. It returns the
// script's reply.
func AcquireSlotNaming(ctx context.Context, s *Store, name string, max int, h idemstore.SlotHolder, lease time.Duration, gone ...string) ([]any, error) {
	args := []any{max, h.Owner, h.Token, micros(lease)}
	for _, g := range gone {
		args = append(args, g)
	}
	return acquireSlotScript.Run(ctx, s.client, []string{s.slotsKey(name)}, args...).Slice()
}
