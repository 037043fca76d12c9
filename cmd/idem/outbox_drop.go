package main

import (
	"errors"
	"fmt"

	"github.com/idemgo/idem/outbox"
	"github.com/spf13/cobra"
)

func newOutboxDropCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "drop ID",
		Short: "Delete a message: it is never delivered (again)",
		Long: `Delete a message from the outbox, whatever its state: it is never
delivered again, and the later messages of its topic no longer wait for it.
A relay delivering it right now may still complete that delivery; its
delivered mark is then refused. Deliver its content by other means if it
matters.

Exit status: 0 dropped, 1 no message with that id, 2 usage error or no ledger.`,
		Example: `  idem outbox drop idem-4f9c0b6d2e8a7f1c3b5d9e0a2c4f6b8d-0`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			l, ob, _, err := openOutbox(cmd)
			if err != nil {
				return err
			}
			defer l.close()
			if err := ob.DropOutbox(cmd.Context(), args[0]); err != nil {
				if errors.Is(err, outbox.ErrMessageNotFound) {
					return fail(exitFailed, "outbox message %s: no message with this id in %s (see 'idem outbox ls%s')", args[0], l.desc, ledgerHint(cmd))
				}
				return fail(exitFailed, "%w", err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: dropped\n", args[0])
			return nil
		},
	}
}
