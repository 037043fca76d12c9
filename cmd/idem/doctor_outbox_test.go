//go:build unix

package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemtest"
	"github.com/idemgo/idem/outbox"
	"github.com/idemgo/idem/pgledger"
	"github.com/jackc/pgx/v5"
)

// backlogQueued is when backlogMessages queues its messages: 20 days
// before the doctor's clock (newEnv's 2026-10-28T02:00:00Z).
var backlogQueued = time.Date(2026, 10, 8, 2, 0, 0, 0, time.UTC)

// backlogMessages queues putMessages's three messages at backlogQueued and
// makes one relay pass whose receiver refuses "poison" for good (parked)
// and fails "payments" for now (pending, retried later): a backlog of 2
// pending messages, the oldest 20 days old, and 1 parked.
func backlogMessages(t *testing.T, s idem.Store, runTx func(ctx context.Context, key idem.Key, fn func(ctx context.Context, put func(context.Context, outbox.Message) (string, error)) error) error) {
	t.Helper()
	putMessages(t, runTx)
	clk := idemtest.NewClock(backlogQueued.Add(time.Minute))
	_, err := outbox.RelayOnce(context.Background(), s, outbox.DeliverFunc(func(_ context.Context, d outbox.Delivery) error {
		if d.Topic == "poison" {
			return idem.Permanent(errors.New("400 bad request"))
		}
		return errors.New("503 receiver down")
	}), outbox.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
}

// wantBacklog checks doctor's outbox findings on the backlog of
// backlogMessages: a warning by default (20 days is more than
// --outbox-max-age's hour), none for the backlog under a longer one; the
// parked message is a warning either way, and doctor exits 0.
func wantBacklog(t *testing.T, e *env, args ...string) {
	t.Helper()
	out, _ := e.want(exitOK, append([]string{"doctor"}, args...)...)
	var pending, parked, topic string
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) > 2 && f[1] == "outbox" {
			switch {
			case strings.Contains(l, "topic "):
				topic = l
			case strings.Contains(l, "pending"):
				pending = l
			}
			if strings.Contains(l, "parked") {
				parked = l
			}
		}
	}
	if !strings.HasPrefix(pending, levelWarn) || !strings.Contains(pending, "2 pending, the oldest queued 20d0h ago (more than --outbox-max-age 1h0m0s)") {
		t.Errorf("doctor on a 20-day-old outbox backlog: the pending line is %q\n%s", pending, out)
	}
	// Per topic: the 2 pending messages are both of topic payments.
	if !strings.HasPrefix(topic, levelWarn) || !strings.Contains(topic, `topic "payments": 2 pending, the oldest queued 20d0h ago`) {
		t.Errorf("doctor on a 20-day-old outbox backlog: the topic line is %q\n%s", topic, out)
	}
	if !strings.HasPrefix(parked, levelWarn) || !strings.Contains(parked, "1 parked") || !strings.Contains(parked, "idem outbox retry") {
		t.Errorf("doctor on a parked outbox message: the parked line is %q\n%s", parked, out)
	}
	out, _ = e.want(exitOK, append([]string{"doctor", "--outbox-max-age", "720h"}, args...)...)
	if line := findingIn(out, levelOK, "outbox"); !strings.Contains(line, "2 pending, the oldest queued 20d0h ago") {
		t.Errorf("doctor --outbox-max-age 720h: want an ok line of 2 pending:\n%s", out)
	}
	e.want(exitUsage, append([]string{"doctor", "--outbox-max-age", "0s"}, args...)...)
}

// TestDoctorOutboxBacklog: 'idem doctor' on a SQLite ledger reports the
// outbox's backlog, how many messages are pending and how long ago the
// oldest was queued, and warns past --outbox-max-age (it said ok with
// 83,000 messages pending, the oldest 20 days old); parked messages are a
// warning too.
func TestDoctorOutboxBacklog(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "2026-10-28T02:00:00Z")
	l, err := idem.OpenLedger(e.ledger, idem.WithClock(idemtest.NewClock(backlogQueued)))
	if err != nil {
		t.Fatal(err)
	}
	backlogMessages(t, l, func(ctx context.Context, key idem.Key, fn func(context.Context, func(context.Context, outbox.Message) (string, error)) error) error {
		return l.RunTx(ctx, key, func(ctx context.Context, tx *sql.Tx) error {
			return fn(ctx, func(ctx context.Context, m outbox.Message) (string, error) { return outbox.Put(ctx, tx, m) })
		})
	})
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	wantBacklog(t, e, e.ledger)
}

// TestDoctorOutboxBacklogPostgres: TestDoctorOutboxBacklog on a Postgres
// ledger.
func TestDoctorOutboxBacklogPostgres(t *testing.T) {
	t.Parallel()
	dsn := os.Getenv("IDEM_TEST_PG_DSN")
	if dsn == "" {
		t.Skip("no PostgreSQL: set IDEM_TEST_PG_DSN (eval \"$(scripts/pg.sh start)\" from the repository's root)")
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	schema := "idemdoc_" + hex.EncodeToString(b[:])
	l, err := pgledger.Open(context.Background(), dsn, pgledger.WithSchema(schema), pgledger.WithRunOptions(idem.WithClock(idemtest.NewClock(backlogQueued))))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := l.Pool().Exec(context.Background(), `DROP SCHEMA IF EXISTS "`+schema+`" CASCADE`); err != nil {
			t.Errorf("dropping schema %s: %v", schema, err)
		}
		l.Close()
	})
	backlogMessages(t, l, func(ctx context.Context, key idem.Key, fn func(context.Context, func(context.Context, outbox.Message) (string, error)) error) error {
		return l.RunTx(ctx, key, func(ctx context.Context, tx pgx.Tx) error {
			return fn(ctx, func(ctx context.Context, m outbox.Message) (string, error) { return outbox.Put(ctx, tx, m) })
		})
	})
	e := newEnv(t, "2026-10-28T02:00:00Z")
	wantBacklog(t, e, "--postgres", dsn, "--postgres-schema", schema)
}
