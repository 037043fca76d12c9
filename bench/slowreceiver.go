package main

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/outbox"
)

// The slow receiver: outbox_slow_receiver_4_topics_vs_1 delivers the same
// number of messages per round to a receiver that answers in
// slowReceiverDelay, with one relay of slowReceiverConcurrency
// (outbox.WithConcurrency): spread over 4 topics on idem's side, all on one
// topic on the other. A topic's messages go one at a time, in order, so
// the one-topic side is the relay of one message at a time; the ratio is
// what concurrency across topics buys (at most 4).
const (
	slowReceiverDelay       = 50 * time.Millisecond
	slowReceiverMessages    = 16 // per round
	slowReceiverConcurrency = 4
)

func outboxSlowReceiver4TopicsVs1(ctx context.Context, cfg config) (result, error) {
	dir, removeDir, err := tempDir("outbox-slow")
	if err != nil {
		return result{}, err
	}
	defer removeDir()
	var sides []side
	for _, topics := range []int{4, 1} {
		l, closeLedger, err := openLedger(ctx, filepath.Join(dir, fmt.Sprintf("topics-%d.db", topics)))
		if err != nil {
			return result{}, err
		}
		defer closeLedger()
		sides = append(sides, slowReceiverSide(l, topics))
	}
	return alternate(ctx, cfg, sides[0], sides[1])
}

// slowReceiverSide queues slowReceiverMessages messages on topics topics
// (untimed) and relays them (timed) with one RelayOnce to the slow
// receiver.
func slowReceiverSide(l *idem.Ledger, topics int) side {
	slow := outbox.DeliverFunc(func(ctx context.Context, _ outbox.Delivery) error {
		select {
		case <-time.After(slowReceiverDelay):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	return side{
		prep: func(ctx context.Context, round int) error {
			_, err := l.DB().ExecContext(ctx, `WITH RECURSIVE c(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM c WHERE i + 1 < ?2)
				INSERT INTO idem_outbox(id, topic, payload, job, period, created)
				SELECT ?1 || printf('%04d', i) || '-0', 'topic-' || (i % ?3), '{"n":1}', 'slow', ?1 || printf('%04d', i), ?4 FROM c`,
				fmt.Sprintf("r%03d/", round), slowReceiverMessages, topics, time.Now().UnixMicro())
			return err
		},
		ops: func(ctx context.Context, round int) (int, error) {
			res, err := outbox.RelayOnce(ctx, l, slow, outbox.WithConcurrency(slowReceiverConcurrency))
			if err == nil && res.Delivered != slowReceiverMessages {
				err = fmt.Errorf("round %d: %d of %d messages delivered (%+v)", round, res.Delivered, slowReceiverMessages, res)
			}
			return res.Delivered, err
		},
	}
}
