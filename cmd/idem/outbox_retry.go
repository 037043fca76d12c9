package main

import (
	"errors"
	"fmt"

	"github.com/idemgo/idem/outbox"
	"github.com/spf13/cobra"
)

func newOutboxRetryCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "retry ID",
		Short: "Put a parked message back to pending: the relay delivers it again",
		Long: `Put a parked message back to pending, due at once, its attempts cleared:
the next relay pass delivers it (after the earlier pending messages of its
topic). Fix what made it park first (the last error is in 'idem outbox ls').

Exit status: 0 done, 1 no parked message with that id, 2 usage error or no ledger.`,
		Example: `  idem outbox retry idem-4f9c0b6d2e8a7f1c3b5d9e0a2c4f6b8d-0`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			l, ob, clk, err := openOutbox(cmd)
			if err != nil {
				return err
			}
			defer l.close()
			if err := ob.RetryOutbox(cmd.Context(), args[0], clk.Now()); err != nil {
				if errors.Is(err, outbox.ErrMessageNotFound) {
					return fail(exitFailed, "outbox message %s: no parked message with this id in %s (see 'idem outbox ls --status parked%s')", args[0], l.desc, ledgerHint(cmd))
				}
				return fail(exitFailed, "%w", err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: pending, due now\n", args[0])
			return nil
		},
	}
}
