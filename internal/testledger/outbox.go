package testledger

import (
	"context"

	"github.com/idemgo/idem/outbox"
)

// Collect is a deliverer that records what it was handed, in order.
type Collect struct {
	Got []outbox.Delivery
}

// Deliver records d.
func (c *Collect) Deliver(_ context.Context, d outbox.Delivery) error {
	c.Got = append(c.Got, d)
	return nil
}
