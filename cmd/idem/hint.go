package main

import (
	"strings"

	"github.com/spf13/cobra"
)

// ledgerHint is the ledger flag to repeat in the commands idem suggests.
func ledgerHint(cmd *cobra.Command) string {
	if p, _ := cmd.Flags().GetString("ledger"); p != "" {
		return " --ledger " + shellQuote(p)
	}
	if d, _ := cmd.Flags().GetString("postgres"); d != "" {
		return " --postgres DSN"
	}
	if a, _ := cmd.Flags().GetString("redis"); a != "" {
		return " --redis ADDR"
	}
	if d, _ := cmd.Flags().GetString("mysql"); d != "" {
		return " --mysql DSN"
	}
	return ""
}

// shellQuote quotes s for a shell if it needs it.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./:=@+,%") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
