package main

import (
	"encoding/base64"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/idemgo/idem/idemstore"
	"github.com/spf13/cobra"
)

// messageJSON is an outbox message as 'idem outbox ls --json' prints it.
// Times are RFC 3339 in UTC; a time that is not set is left out.
type messageJSON struct {
	ID            string            `json:"id"`
	Topic         string            `json:"topic"`
	Status        string            `json:"status"`
	Attempts      int               `json:"attempts"`
	Job           string            `json:"job"`
	Period        string            `json:"period"`
	Item          string            `json:"item,omitempty"`
	Created       *time.Time        `json:"created,omitempty"`
	NotBefore     *time.Time        `json:"not_before,omitempty"`
	LeaseUntil    *time.Time        `json:"lease_until,omitempty"`
	Owner         string            `json:"owner,omitempty"`
	LastError     string            `json:"last_error,omitempty"`
	Delivered     *time.Time        `json:"delivered,omitempty"`
	Headers       map[string]string `json:"headers,omitempty"`
	Payload       string            `json:"payload,omitempty"`        // when it is UTF-8 text
	PayloadBase64 string            `json:"payload_base64,omitempty"` // when it is not
}

func messageToJSON(m idemstore.OutboxRecord) messageJSON {
	j := messageJSON{ID: m.ID, Topic: m.Topic, Status: string(m.Status), Attempts: m.Attempts,
		Job: m.Key.Job, Period: m.Key.Period, Item: m.Item, Created: utcPtr(m.Created), NotBefore: utcPtr(m.NotBefore),
		LeaseUntil: utcPtr(m.LeaseUntil), Owner: m.Owner, LastError: m.LastError, Delivered: utcPtr(m.Delivered), Headers: m.Headers}
	if utf8.Valid(m.Payload) {
		j.Payload = string(m.Payload)
	} else {
		j.PayloadBase64 = base64.StdEncoding.EncodeToString(m.Payload)
	}
	return j
}

// messageNote says, for people, what a message's state means and what to
// do.
func messageNote(m idemstore.OutboxRecord, now time.Time) string {
	switch m.Status {
	case idemstore.OutboxPending:
		holder, _, _ := strings.Cut(m.Owner, ";")
		switch {
		case now.Before(m.LeaseUntil):
			return "being delivered (" + holder + "), lease until " + fmtTime(m.LeaseUntil)
		case now.Before(m.NotBefore):
			return "backing off until " + fmtTime(m.NotBefore) + ": " + m.LastError
		case m.LastError != "":
			return "due again: " + m.LastError
		}
		return "due"
	case idemstore.OutboxParked:
		return "fix, then: idem outbox retry " + m.ID + ": " + m.LastError
	case idemstore.OutboxDelivered:
		return "delivered " + fmtTime(m.Delivered)
	}
	return ""
}

var outboxStatusNames = []string{string(idemstore.OutboxPending), string(idemstore.OutboxDelivered), string(idemstore.OutboxParked)}

func newOutboxLsCmd() *cobra.Command {
	var topic, status string
	var limit int
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "ls [--topic TOPIC] [--status STATUS] [--json]",
		Short: "List the outbox's messages",
		Long: `List the outbox's messages, in the order the relay delivers them within
each topic.

Statuses:
  pending    waiting for a relay: due, being delivered (leased), or backing
             off after a failed attempt
  delivered  the webhook (or deliverer) accepted it; kept until the relay's
             retention deletes it
  parked     given up on (a permanent failure, or the last attempt): fix the
             cause, then 'idem outbox retry ID', or 'idem outbox drop ID'

A parked message does not hold up the later messages of its topic.

Exit status: 0 listed (perhaps nothing), 2 usage error or no ledger.`,
		Example: `  idem outbox ls --status parked
  idem outbox ls --topic payments --json | jq -r '.[] | select(.status == "pending") | .id'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			f := idemstore.OutboxFilter{Topic: topic, Status: idemstore.OutboxStatus(status), Limit: limit}
			switch idemstore.OutboxStatus(status) {
			case "", idemstore.OutboxPending, idemstore.OutboxDelivered, idemstore.OutboxParked:
			default:
				return usageError(fmt.Errorf("--status %q: use one of %s", status, strings.Join(outboxStatusNames, ", ")))
			}
			if limit < 0 {
				return usageError(fmt.Errorf("--limit %d: must be 0 (all) or more", limit))
			}
			l, ob, clk, err := openOutbox(cmd)
			if err != nil {
				return err
			}
			defer l.close()
			msgs, err := ob.ListOutbox(cmd.Context(), f)
			if err != nil {
				return fail(exitFailed, "%w", err)
			}
			out := cmd.OutOrStdout()
			if asJSON {
				list := make([]messageJSON, 0, len(msgs))
				for _, m := range msgs {
					list = append(list, messageToJSON(m))
				}
				return writeJSON(out, list)
			}
			if len(msgs) == 0 {
				fmt.Fprintln(cmd.ErrOrStderr(), "no messages match")
				return nil
			}
			now := clk.Now()
			tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tTOPIC\tSTATUS\tATTEMPTS\tKEY\tCREATED\tNOTE")
			for _, m := range msgs {
				key := m.Key.Job + " " + m.Key.Period
				if m.Item != "" {
					key += " " + m.Item
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\n", m.ID, m.Topic, m.Status, m.Attempts, key, fmtTime(m.Created),
					truncate(messageNote(m, now), 100))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().StringVar(&topic, "topic", "", "only this topic")
	cmd.Flags().StringVar(&status, "status", "", "only this status: "+strings.Join(outboxStatusNames, ", "))
	cmd.Flags().IntVar(&limit, "limit", 0, "at most this many messages (0 = all)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print a JSON array, for scripts")
	return cmd
}
