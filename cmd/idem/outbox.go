package main

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/cmd/idem/internal/spec"
	"github.com/idemgo/idem/idemstore"
	"github.com/idemgo/idem/outbox"
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

func newOutboxRelayCmd() *cobra.Command {
	var (
		webhook          string
		lease, poll, ret time.Duration
		retention        string
		batch            int
		timeout          time.Duration
		verbose          bool
	)
	cmd := &cobra.Command{
		Use:   "relay --webhook URL [--ledger PATH | --postgres DSN]",
		Short: "Deliver the outbox's messages to a webhook until SIGTERM",
		Long: `Deliver the outbox's messages: POST each message's payload to the webhook,
with its headers and Idempotency-Key set to the message's id (plus
Idem-Topic and Idem-Attempt). The messages of one topic go one at a time,
in the order their transactions committed.

  2xx                 delivered
  4xx but 408, 429    a permanent failure: the message is parked at once
                      (fix the cause, then 'idem outbox retry ID')
  anything else, or   a failed attempt: retried after the backoff (1 s,
  no answer           doubling up to 10 min, with jitter); parked after
                      16 attempts (at least about 33 minutes of failing)

Several relays may run at once, on one host or many (the Postgres ledger
hands each message to one of them at a time); a relay that dies leaves
its messages to the others after --lease. It runs until SIGTERM or
SIGINT, then claims nothing more, finishes the delivery under way (within
its deadline: --timeout, and the message's --lease), records it, and exits
0; the messages it had claimed and not yet posted are given back, due
again at once for the next relay, their attempts not counted (a message
that was never posted never moves toward parking, however many deploys
stop relays).

With --retention, delivered messages older than that are deleted after
each pass; by default they are kept (list them with 'idem outbox ls').

Exit status: 0 stopped by a signal, 2 usage error or no ledger.`,
		Example: `  idem outbox relay --ledger /var/lib/idem/ledger.db --webhook https://payments.example/notify
  idem outbox relay --postgres "$IDEM_POSTGRES" --webhook http://localhost:8080/hook --retention 7d`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			u, err := url.Parse(webhook)
			switch {
			case webhook == "":
				return usageError(errors.New("--webhook URL is required"))
			case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
				return usageError(fmt.Errorf("--webhook %q: want an http:// or https:// URL", webhook))
			case timeout <= 0:
				return usageError(fmt.Errorf("--timeout %s: must be positive", timeout))
			}
			if retention != "" {
				if ret, err = spec.ParseDuration(retention); err != nil || ret <= 0 {
					return usageError(fmt.Errorf("--retention %q: want a positive duration like 7d or 36h", retention))
				}
			}
			stderr := cmd.ErrOrStderr()
			level := slog.LevelWarn
			if verbose {
				level = slog.LevelInfo
			}
			logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
			opts := []outbox.Option{outbox.WithLease(lease), outbox.WithPoll(poll), outbox.WithBatch(batch), outbox.WithLogger(logger)}
			if ret > 0 {
				opts = append(opts, outbox.WithRetention(ret))
			}
			opts = append(opts, outbox.OnDelivery(func(r outbox.DeliveryResult) {
				if r.Outcome == outbox.DeliverySent {
					logger.Info("outbox relay: delivered", slog.String("id", r.ID), slog.String("topic", r.Topic), slog.Int("attempt", r.Attempt))
				}
			}))

			sig, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
			defer stop()
			l, _, clk, err := openOutbox(cmd)
			if err != nil {
				return err
			}
			defer l.close()
			opts = append(opts, outbox.WithClock(clk))
			client := &http.Client{Timeout: timeout}
			if verbose {
				fmt.Fprintf(stderr, "idem: relaying the outbox of %s to %s\n", l.desc, webhook)
			}
			// On the signal the relay stops gracefully (outbox.WithStop):
			// the POST under way is not aborted (that would leave the
			// message pending although the receiver may have applied it,
			// and the next relay would post it again: a duplicate on every
			// deploy); it finishes within its deadline (the lease and
			// --timeout) and is recorded, and the messages claimed with it
			// and not yet posted are given back, due at once, their
			// attempts not counted.
			d := &underway{next: outbox.Webhook(webhook, client)}
			context.AfterFunc(sig, func() {
				if id := d.current(); id != "" {
					fmt.Fprintf(stderr, "idem: stopping: finishing the delivery of %s under way first\n", id)
				}
			})
			opts = append(opts, outbox.WithStop(sig.Done()))
			if err := outbox.Relay(context.Background(), l.store, d, opts...); err != nil {
				return usageError(err)
			}
			if verbose {
				fmt.Fprintln(stderr, "idem: relay stopped")
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&webhook, "webhook", "", "POST each message to this http:// or https:// URL (required)")
	cmd.Flags().DurationVar(&lease, "lease", outbox.DefaultLease, "how long a relay holds a message it delivers; after it, another relay may deliver it again")
	cmd.Flags().DurationVar(&poll, "poll", outbox.DefaultPoll, "how long to wait before looking again when nothing is due")
	cmd.Flags().IntVar(&batch, "batch", outbox.DefaultBatch, "messages claimed at once (at most one per topic)")
	cmd.Flags().StringVar(&retention, "retention", "", "delete delivered messages older than this (e.g. 7d, 36h); default: keep them")
	cmd.Flags().DurationVar(&timeout, "timeout", 30*time.Second, "HTTP timeout of one delivery (a delivery also ends with --lease, if that is shorter)")
	cmd.Flags().BoolVarP(&verbose, "verbose", "v", false, "log every delivery on stderr")
	return cmd
}

// underway is a Deliverer that knows the delivery under way, so that the
// relay can say, on the signal, which one it finishes before it stops.
type underway struct {
	next outbox.Deliverer
	mu   sync.Mutex
	id   string // the id of the delivery under way, "" for none
}

func (u *underway) Deliver(ctx context.Context, dl outbox.Delivery) error {
	u.mu.Lock()
	u.id = dl.ID
	u.mu.Unlock()
	defer func() {
		u.mu.Lock()
		u.id = ""
		u.mu.Unlock()
	}()
	return u.next.Deliver(ctx, dl)
}

func (u *underway) current() string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.id
}

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
