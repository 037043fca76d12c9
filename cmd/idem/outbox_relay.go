package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"net/url"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/cmd/idem/internal/spec"
	"github.com/idemgo/idem/limit"
	"github.com/idemgo/idem/outbox"
	"github.com/spf13/cobra"
)

// outboxRelayLong is the help text of 'idem outbox relay'.
const outboxRelayLong = `Deliver the outbox's messages: POST each message's payload to the webhook,
with its headers and Idempotency-Key set to the message's id (plus
Idem-Topic and Idem-Attempt). The messages of one topic go one at a time,
in the order their transactions committed; with --concurrency N, up to N
topics' messages are posted at once (each topic still one at a time, in
order). --rate NAME=PER_SECOND[,BURST] paces the posts by a rate shared
with every process that names it in the ledger (other relays, 'idem run
--rate'): a post waiting for it is not a failed attempt.

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

With --to URL instead of --webhook, the messages go to a broker, each
topic's in order, the next one only after the broker acknowledged the
last:

  nats://HOST:PORT/?stream=NAME&subject_prefix=PREFIX
      NATS JetStream: published to PREFIX+topic with Nats-Msg-Id set to
      the message's id (the stream drops a copy re-sent within its
      duplicate window, after a relay crash), waiting for the ack
  kafka://HOST:PORT[,HOST:PORT...]/?topic_prefix=PREFIX (or ?topic=NAME)
      Kafka: an idempotent producer, acks from all in-sync replicas, the
      record's key the message's topic, its id in the Idem-Message-Id
      header (at least once: a consumer dedupes by it)

  amqp://USER:PASS@HOST:PORT/VHOST?exchange=NAME[&routing_key=KEY] (or amqps://)
      RabbitMQ: persistent, mandatory, its message-id the message's id,
      routing key its topic (or KEY), delivered once the broker confirmed
      it; a message no queue takes comes back and is a failed attempt
      (at least once: a consumer dedupes by the message-id)

A failure to publish is a failed attempt, retried after the backoff; a
topic that makes no valid subject or Kafka topic name parks at once.

With --retention, delivered messages older than that are deleted after
each pass; by default they are kept (list them with 'idem outbox ls').

Exit status: 0 stopped by a signal, 2 usage error or no ledger.`

func newOutboxRelayCmd() *cobra.Command {
	var (
		webhook, to      string
		lease, poll, ret time.Duration
		retention        string
		batch, conc      int
		rates            []string
		timeout          time.Duration
		verbose          bool
	)
	cmd := &cobra.Command{
		Use:   "relay (--webhook URL | --to URL) [--ledger PATH | --postgres DSN]",
		Short: "Deliver the outbox's messages to a webhook or a broker until SIGTERM",
		Long:  outboxRelayLong,
		Example: `  idem outbox relay --ledger /var/lib/idem/ledger.db --webhook https://payments.example/notify
  idem outbox relay --postgres "$IDEM_POSTGRES" --webhook http://localhost:8080/hook --retention 7d
  idem outbox relay --ledger ledger.db --webhook https://crm.example/hook --concurrency 4 --rate crm=20,5
  idem outbox relay --ledger ledger.db --to 'nats://127.0.0.1:4222/?stream=ORDERS&subject_prefix=orders.'
  idem outbox relay --ledger ledger.db --to 'kafka://kafka1:9092,kafka2:9092/?topic_prefix=orders.'
  idem outbox relay --ledger ledger.db --to 'amqp://relay:secret@mq.internal:5672/prod?exchange=events'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			u, err := url.Parse(webhook)
			switch {
			case webhook == "" && to == "":
				return usageError(errors.New("--webhook URL or --to URL is required"))
			case webhook != "" && to != "":
				return usageError(errors.New("--webhook and --to: give one"))
			case webhook != "" && (err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == ""):
				return usageError(fmt.Errorf("--webhook %q: want an http:// or https:// URL", webhook))
			case timeout <= 0:
				return usageError(fmt.Errorf("--timeout %s: must be positive", timeout))
			case conc < 1:
				return usageError(fmt.Errorf("--concurrency %d: at least 1", conc))
			}
			specs, err := relayRates(rates)
			if err != nil {
				return err
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
			opts := []outbox.Option{outbox.WithLease(lease), outbox.WithPoll(poll), outbox.WithBatch(batch), outbox.WithLogger(logger),
				outbox.WithConcurrency(conc)}
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
			lims, err := relayLimits(l.store, specs)
			if err != nil {
				return err
			}
			opts = append(opts, lims...)
			var next outbox.Deliverer = outbox.Webhook(webhook, &http.Client{Timeout: timeout})
			dest := webhook
			if to != "" {
				d, closeTo, err := relayTo(to)
				if err != nil {
					return err
				}
				defer closeTo()
				dest = to // never its password: the log may be read by others
				if tu, err := url.Parse(to); err == nil {
					dest = tu.Redacted()
				}
				next = outbox.DeliverFunc(func(ctx context.Context, dl outbox.Delivery) error {
					ctx, cancel := context.WithTimeout(ctx, timeout) // the wait for the broker's ack
					defer cancel()
					return d.Deliver(ctx, dl)
				})
			}
			if verbose {
				fmt.Fprintf(stderr, "idem: relaying the outbox of %s to %s\n", l.desc, dest)
			}
			// On the signal the relay stops gracefully (outbox.WithStop):
			// the POST under way is not aborted (that would leave the
			// message pending although the receiver may have applied it,
			// and the next relay would post it again: a duplicate on every
			// deploy); it finishes within its deadline (the lease and
			// --timeout) and is recorded, and the messages claimed with it
			// and not yet posted are given back, due at once, their
			// attempts not counted.
			d := &underway{next: next}
			context.AfterFunc(sig, func() {
				if ids := d.current(); ids != "" {
					fmt.Fprintf(stderr, "idem: stopping: finishing the delivery of %s under way first\n", ids)
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
	cmd.Flags().StringVar(&webhook, "webhook", "", "POST each message to this http:// or https:// URL (this or --to is required)")
	cmd.Flags().StringVar(&to, "to", "", "deliver each message to a broker: nats://HOST:PORT/?stream=NAME&subject_prefix=PREFIX (NATS JetStream), kafka://HOST:PORT/?topic_prefix=PREFIX (Kafka) or amqp://USER:PASS@HOST:PORT/VHOST?exchange=NAME (RabbitMQ)")
	cmd.Flags().DurationVar(&lease, "lease", outbox.DefaultLease, "how long a relay holds a message it delivers; after it, another relay may deliver it again")
	cmd.Flags().DurationVar(&poll, "poll", outbox.DefaultPoll, "how long to wait before looking again when nothing is due")
	cmd.Flags().IntVar(&batch, "batch", outbox.DefaultBatch, "messages claimed at once: runs of a topic's messages, delivered in order (with --concurrency N, at most batch/N per topic)")
	cmd.Flags().IntVar(&conc, "concurrency", outbox.DefaultConcurrency, "posts in flight at once, each of a different topic (a topic's messages always go one at a time, in order)")
	cmd.Flags().StringArrayVar(&rates, "rate", nil, "pace the posts by the limit NAME, shared by every process that names it in the ledger: NAME=PER_SECOND[,BURST] posts a second (burst 1 when not given); repeatable")
	cmd.Flags().StringVar(&retention, "retention", "", "delete delivered messages older than this (e.g. 7d, 36h); default: keep them")
	cmd.Flags().DurationVar(&timeout, "timeout", 30*time.Second, "timeout of one delivery: the HTTP request, or with --to the wait for the broker's ack (a delivery also ends with --lease, if that is shorter)")
	cmd.Flags().BoolVarP(&verbose, "verbose", "v", false, "log every delivery on stderr")
	return cmd
}

// relayRates parses the --rate flags.
func relayRates(rates []string) ([]spec.Limit, error) {
	var specs []spec.Limit
	for _, v := range rates {
		sp, err := spec.ParseRate(v)
		if err != nil {
			return nil, flagError("--rate", err)
		}
		specs = append(specs, sp)
	}
	return specs, nil
}

// relayLimits are the relay's options of the rates specs, kept in s.
func relayLimits(s idem.Store, specs []spec.Limit) ([]outbox.Option, error) {
	var opts []outbox.Option
	for _, sp := range specs {
		r, err := limit.NewRate(s, sp.Name, sp.PerSecond, sp.Burst)
		if err != nil {
			return nil, usageError(fmt.Errorf("--rate %s: %w", sp, err))
		}
		opts = append(opts, outbox.WithLimits(r))
	}
	return opts, nil
}

// underway is a Deliverer that knows the deliveries under way (one per
// topic, up to --concurrency), so that the relay can say, on the signal,
// which ones it finishes before it stops.
type underway struct {
	next outbox.Deliverer
	mu   sync.Mutex
	ids  map[string]bool // the ids of the deliveries under way
}

func (u *underway) Deliver(ctx context.Context, dl outbox.Delivery) error {
	u.mu.Lock()
	if u.ids == nil {
		u.ids = map[string]bool{}
	}
	u.ids[dl.ID] = true
	u.mu.Unlock()
	defer func() {
		u.mu.Lock()
		delete(u.ids, dl.ID)
		u.mu.Unlock()
	}()
	return u.next.Deliver(ctx, dl)
}

// current lists the ids under way, sorted, "" for none.
func (u *underway) current() string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return strings.Join(slices.Sorted(maps.Keys(u.ids)), ", ")
}
