package pgledger_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/jackc/pgx/v5/pgxpool"
)

// retryLog is a slog.Handler that keeps Run's "retrying" messages.
type retryLog struct {
	mu   sync.Mutex
	msgs []string
}

func (h *retryLog) Enabled(context.Context, slog.Level) bool { return true }
func (h *retryLog) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *retryLog) WithGroup(string) slog.Handler            { return h }
func (h *retryLog) Handle(_ context.Context, r slog.Record) error {
	if !strings.HasPrefix(r.Message, "idem: recording the attempt's end failed; retrying") {
		return nil
	}
	msg := r.Message
	r.Attrs(func(a slog.Attr) bool { msg += " " + a.String(); return true })
	h.mu.Lock()
	h.msgs = append(h.msgs, msg)
	h.mu.Unlock()
	return nil
}

func (h *retryLog) retries() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.msgs...)
}

// TestDoneMarkRetriedAfterConnectionKilled: between fn and its done mark,
// every connection of the ledger's pool is terminated by the server
// (pg_terminate_backend: "terminating connection due to administrator
// command", SQLSTATE 57P01). The done mark's first statement fails on a
// dead connection; Run retries it on a new one, and the key is done: fn
// ran once, and AtMostOnce does not leave the key unknown.
func TestDoneMarkRetriedAfterConnectionKilled(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	admin := newPool(t)
	for _, mode := range []struct {
		name string
		opt  idem.Option
	}{{"at-least-once", idem.AtLeastOnce()}, {"at-most-once", idem.AtMostOnce()}} {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			app := uniqueName("idem_finish_")
			cfg, err := pgxpool.ParseConfig(testDSN(t))
			if err != nil {
				t.Fatal(err)
			}
			cfg.ConnConfig.RuntimeParams["application_name"] = app
			pool, err := pgxpool.NewWithConfig(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(pool.Close)
			l := openLedger(t, pool)
			key := idem.Key{Job: "settle", Period: "2026-10-27"}
			logs := &retryLog{}
			ran := 0
			var res idem.Result
			err = l.Run(ctx, key, func(ctx context.Context) error {
				ran++
				// Kill the pool's connections, and wait until the server has
				// ended them all.
				if _, err := admin.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1`, app); err != nil {
					return err
				}
				deadline := time.Now().Add(10 * time.Second)
				for {
					var n int
					if err := admin.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1`, app).Scan(&n); err != nil {
						return err
					}
					if n == 0 {
						return nil
					}
					if time.Now().After(deadline) {
						return errors.New("the terminated connections were still there after 10s")
					}
					time.Sleep(10 * time.Millisecond)
				}
			}, mode.opt, idem.WithLogger(slog.New(logs)), idem.ReportTo(&res))
			if err != nil || res.Outcome != idem.Ran || ran != 1 {
				t.Fatalf("Run: %v (%s), fn ran %d times; want ran once", err, res.Outcome, ran)
			}
			rec, ok, err := l.Lookup(ctx, key)
			if err != nil || !ok || rec.Status != idem.StatusDone || rec.Attempt != 1 {
				t.Fatalf("record %+v (%v, %v), want done by attempt 1", rec, ok, err)
			}
			r := logs.retries()
			if len(r) == 0 {
				t.Fatal("the done mark's first try did not fail: the connections were not killed")
			}
			t.Logf("retried: %q", r)
		})
	}
}
