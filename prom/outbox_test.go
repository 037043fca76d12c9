package prom_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/outbox"
	"github.com/idemgo/idem/prom"
	"github.com/prometheus/client_golang/prometheus"
)

// fixedClock is a clock that stands still at now.
type fixedClock struct{ now time.Time }

func (c fixedClock) Now() time.Time                         { return c.now }
func (c fixedClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// TestOutboxMetricsFromRealLedger: messages queued an hour ago on a real
// SQLite ledger show as the backlog with their age; a relay pass that
// delivers one topic and parks the other moves them to delivered and
// parked, and counts the attempts by outcome.
func TestOutboxMetricsFromRealLedger(t *testing.T) {
	ctx := context.Background()
	queued := time.Now().Add(-time.Hour)
	l, err := idem.OpenLedger(filepath.Join(t.TempDir(), "ledger.db"), idem.WithClock(fixedClock{queued}))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	reg := prometheus.NewRegistry()
	o, err := prom.NewOutbox(reg)
	if err != nil {
		t.Fatal(err)
	}
	o.Watch(l)
	err = l.RunTx(ctx, idem.Key{Job: "settle", Period: "2026-10-27"}, func(ctx context.Context, tx *sql.Tx) error {
		for _, topic := range []string{"payments", "payments", "mail"} {
			if _, err := outbox.Put(ctx, tx, outbox.Message{Topic: topic, Payload: []byte("x")}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	g := gather(t, reg)
	g.expect(t, []series{
		{"idem_outbox_up", "", 1},
		{"idem_outbox_messages", "status=pending,topic=payments", 2},
		{"idem_outbox_messages", "status=pending,topic=mail", 1},
		{"idem_outbox_messages", "status=parked,topic=mail", 0},
		{"idem_outbox_messages", "status=delivered,topic=payments", 0},
	})
	for _, topic := range []string{"payments", "mail"} {
		// Queued an hour ago by the run's clock; read by the system's.
		if age := g.value("idem_outbox_oldest_pending_age_seconds", "topic="+topic); age < 3600 {
			t.Errorf("oldest pending age of %s = %v, want at least 3600", topic, age)
		}
	}

	mailDown := errors.New("mail server says: no such mailbox")
	res, err := outbox.RelayOnce(ctx, l, outbox.DeliverFunc(func(ctx context.Context, d outbox.Delivery) error {
		if d.Topic == "mail" {
			return idem.Permanent(mailDown)
		}
		return nil
	}), o.RelayOption())
	if err != nil || res.Delivered != 2 || res.Parked != 1 {
		t.Fatalf("RelayOnce: %+v, %v", res, err)
	}
	gather(t, reg).expect(t, []series{
		{"idem_outbox_deliveries_total", "outcome=delivered,topic=payments", 2},
		{"idem_outbox_deliveries_total", "outcome=parked,topic=mail", 1},
		{"idem_outbox_messages", "status=pending,topic=payments", 0},
		{"idem_outbox_messages", "status=delivered,topic=payments", 2},
		{"idem_outbox_messages", "status=parked,topic=mail", 1},
		{"idem_outbox_messages", "status=pending,topic=mail", 0},
		{"idem_outbox_oldest_pending_age_seconds", "topic=payments", 0},
		{"idem_outbox_oldest_pending_age_seconds", "topic=mail", 0},
	})

	// A closed ledger cannot be read: up goes to 0.
	l.Close()
	gather(t, reg).expect(t, []series{{"idem_outbox_up", "", 0}})
}

// TestOutboxRegisterTwice: a second NewOutbox on the same registry is an
// error, not a panic.
func TestOutboxRegisterTwice(t *testing.T) {
	reg := prometheus.NewRegistry()
	if _, err := prom.NewOutbox(reg); err != nil {
		t.Fatal(err)
	}
	if _, err := prom.NewOutbox(reg); err == nil {
		t.Fatal("second NewOutbox: no error")
	}
}
