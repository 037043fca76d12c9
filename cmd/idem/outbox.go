package main

import (
	"errors"
	"fmt"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemstore"
	"github.com/spf13/cobra"
)

// The outbox commands: a relay with the Webhook deliverer, and the
// operator's view and repairs of the messages that transactions queued
// with outbox.Put.

func newOutboxCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "outbox",
		Short: "Relay, list, retry and drop the messages of the transactional outbox",
		Long: `The outbox holds the messages that transactions queued with outbox.Put (in a
RunTx, EachTx or CatchUpTx body): each committed with its transaction's
business writes, and waits for a relay to deliver it.

  idem outbox relay --webhook URL   deliver them: POST each to URL, until SIGTERM
  idem outbox relay --to amqp://…  or publish each to RabbitMQ
  idem outbox ls                    list them (pending, delivered, parked)
  idem outbox retry ID              put a parked message back to pending
  idem outbox drop ID               delete a message: it is never delivered (again)

Delivery is at least once: a relay that dies between the POST and its
delivered mark posts the message again, with the same Idempotency-Key. The
receiver must dedupe by it.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return usageError(errors.New("outbox: name a subcommand: relay, ls, retry or drop"))
		},
	}
	cmd.AddCommand(newOutboxRelayCmd(), newOutboxLsCmd(), newOutboxRetryCmd(), newOutboxDropCmd())
	return cmd
}

// openOutbox opens the existing ledger the flags name and its outbox.
func openOutbox(cmd *cobra.Command) (*ledger, idemstore.OutboxStore, idem.Clock, error) {
	l, clk, err := openForOps(cmd)
	if err != nil {
		return nil, nil, nil, err
	}
	ob, ok := l.store.(idemstore.OutboxStore)
	if !ok {
		l.close()
		return nil, nil, nil, usageError(fmt.Errorf("%s has no outbox (it does not implement idemstore.OutboxStore)", l.desc))
	}
	return l, ob, clk, nil
}
