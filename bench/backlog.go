package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/outbox"
	"github.com/idemgo/idem/pgledger"
	"github.com/jackc/pgx/v5"
)

// The outbox_backlog lines: relays that deliver from an outbox holding a
// backlog of 100,000 pending messages (a receiver that was down, or slower
// than the jobs, for a while) against the same relays on an outbox that
// holds only what they deliver. A claim that read every pending message
// made the backlog's relays slower the larger the backlog, so that it
// never drained.

// Sizes of the outbox_backlog lines.
const (
	backlogMessages = 100_000 // pending messages in the full outbox
	backlogTopics   = 4       // their topics, interleaved
	backlogRelays   = 3       // relays that share each outbox
	// backlogRoundMin is the fewest messages a round delivers: a round of
	// the default -n (200) lasts about 0.1 s on Postgres, short enough
	// for a checkpoint or an autovacuum to swing the ratio between 0.7
	// and 1.3 from one run to the next; 2,000 a round kept three runs
	// within 0.83-0.90.
	backlogRoundMin = 2000
)

// backlogSide feeds each ledger's outbox (untimed) n messages of the
// topics every round, as if jobs queued them, then runs backlogRelays
// relays (outbox.Relay, WithPoll 1 ms, a deliverer that does nothing), one
// on each of relays, until n messages are delivered, and counts every
// delivery they made (a relay stopped when the count was reached ends the
// claim it was handing out first). On the full outbox the relays deliver
// the backlog's oldest messages, and it stays at its size; on the empty
// one they deliver the round's, and its round ends as its outbox empties
// (the last runs of a topic go to one relay while the others find every
// head held): a ratio above 1 is that tail, not a backlog that helps.
func backlogSide(relays []idem.Store, feed func(ctx context.Context, round, n int) error, n int) side {
	return side{
		prep: func(ctx context.Context, round int) error { return feed(ctx, round, n) },
		ops: func(ctx context.Context, round int) (int, error) {
			var delivered atomic.Int64
			rctx, stop := context.WithCancel(ctx)
			defer stop()
			d := outbox.DeliverFunc(func(context.Context, outbox.Delivery) error {
				if delivered.Add(1) >= int64(n) {
					stop()
				}
				return nil
			})
			var wg sync.WaitGroup
			errs := make([]error, 2*len(relays)) // Relay's, and its passes' first
			for i, s := range relays {
				wg.Add(1)
				go func() {
					defer wg.Done()
					errs[2*i] = outbox.Relay(rctx, s, d, outbox.WithPoll(time.Millisecond), outbox.WithOwner(fmt.Sprintf("relay-%d", i)),
						outbox.OnPass(func(_ outbox.Result, err error) {
							if err != nil && rctx.Err() == nil && errs[2*i+1] == nil {
								errs[2*i+1] = err
								stop()
							}
						}))
				}()
			}
			wg.Wait()
			if err := errors.Join(errs...); err != nil {
				return 0, err
			}
			if ctx.Err() != nil {
				return 0, ctx.Err()
			}
			return int(delivered.Load()), nil
		},
	}
}

// pgOutboxBacklog100kVsEmpty: 3 relays, each a pgledger.Ledger on a pool
// of its own (three hosts), deliver from an outbox holding 100,000
// pending messages of 4 topics, against 3 such relays on an outbox of
// its own holding only the messages they deliver; both outboxes are fed
// max(cfg.n, backlogRoundMin) messages of the topics each round.
func pgOutboxBacklog100kVsEmpty(ctx context.Context, cfg config) (result, error) {
	if why := scaleSkip(cfg); why != "" {
		return result{skipped: why}, nil
	}
	var sides []side
	for _, backlog := range []int{backlogMessages, 0} {
		e, why, err := openPGWith(ctx, cfg, pgOptions{})
		if err != nil || e == nil {
			return result{skipped: why}, err
		}
		defer e.close(ctx)
		var relays []idem.Store
		for range backlogRelays {
			p, err := e.extraPool(ctx, "idem")
			if err != nil {
				return result{}, err
			}
			l, err := pgledger.New(ctx, p, pgledger.WithSchema(e.ledger.Schema()))
			if err != nil {
				return result{}, err
			}
			relays = append(relays, l)
		}
		s := pgx.Identifier{e.ledger.Schema()}.Sanitize()
		put := func(ctx context.Context, prefix string, n int) error {
			_, err := e.idemPool.Exec(ctx, `INSERT INTO `+s+`.outbox (id, topic, payload, job, period, created)
				SELECT $1 || lpad(g::text, 7, '0') || '-0', 'topic-' || (g % $3), '{"n":1}', 'backlog', $1 || lpad(g::text, 7, '0'),
					(extract(epoch FROM clock_timestamp()) * 1e6)::bigint
				FROM generate_series(0, $2 - 1) AS g ORDER BY g`, prefix, n, backlogTopics)
			return err
		}
		if backlog > 0 {
			if err := put(ctx, "old/", backlog); err != nil {
				return result{}, fmt.Errorf("fill: %w", err)
			}
			if _, err := e.idemPool.Exec(ctx, `VACUUM ANALYZE `+s+`.outbox`); err != nil {
				return result{}, err
			}
		}
		sides = append(sides, backlogSide(relays, func(ctx context.Context, round, n int) error {
			return put(ctx, fmt.Sprintf("r%03d/", round), n)
		}, max(cfg.n, backlogRoundMin)))
	}
	return alternate(ctx, cfg, sides[0], sides[1])
}

// outboxBacklog100kVsEmpty is pg_outbox_backlog_100k_vs_empty on the
// SQLite ledger: 3 relays (goroutines of this process) share each
// ledger.
func outboxBacklog100kVsEmpty(ctx context.Context, cfg config) (result, error) {
	if why := scaleSkip(cfg); why != "" {
		return result{skipped: why}, nil
	}
	dir, removeDir, err := tempDir("outbox-backlog")
	if err != nil {
		return result{}, err
	}
	defer removeDir()
	var sides []side
	for _, backlog := range []int{backlogMessages, 0} {
		l, closeLedger, err := openLedger(ctx, filepath.Join(dir, fmt.Sprintf("backlog-%d.db", backlog)))
		if err != nil {
			return result{}, err
		}
		defer closeLedger()
		put := func(ctx context.Context, prefix string, n int) error {
			_, err := l.DB().ExecContext(ctx, `WITH RECURSIVE c(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM c WHERE i + 1 < ?2)
				INSERT INTO idem_outbox(id, topic, payload, job, period, created)
				SELECT ?1 || printf('%07d', i) || '-0', 'topic-' || (i % ?3), '{"n":1}', 'backlog', ?1 || printf('%07d', i), ?4 FROM c`,
				prefix, n, backlogTopics, time.Now().UnixMicro())
			return err
		}
		if backlog > 0 {
			if err := put(ctx, "old/", backlog); err != nil {
				return result{}, fmt.Errorf("fill: %w", err)
			}
			if err := checkpoint(ctx, l); err != nil {
				return result{}, err
			}
		}
		relays := make([]idem.Store, backlogRelays)
		for i := range relays {
			relays[i] = l
		}
		sides = append(sides, backlogSide(relays, func(ctx context.Context, round, n int) error {
			return put(ctx, fmt.Sprintf("r%03d/", round), n)
		}, max(cfg.n, backlogRoundMin)))
	}
	return alternate(ctx, cfg, sides[0], sides[1])
}
