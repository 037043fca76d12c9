// Package crashcheck is the README's "Testing your own job" scenario, and
// the crash kit's other promises, as checks that every store's tests run:
// the root module's on the SQLite ledger and the state file, pgledger's on
// both of its ledgers, redisstore's on Redis. Only the line that opens the
// store differs from the README.
package crashcheck

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemtest"
)

// Store is what the README's job needs of a store: its Run method, which
// every store of idem has.
type Store interface {
	Run(ctx context.Context, key idem.Key, fn func(context.Context) error, opts ...idem.Option) error
}

// Open opens a new, empty store for t.
type Open func(t *testing.T) Store

// mailGateway is the README's fake mail gateway: it counts the reports it
// accepted, by request id.
type mailGateway struct{ sent map[string]int }

func (g *mailGateway) SendReport(ctx context.Context) error {
	info, _ := idem.InfoFrom(ctx)
	g.sent[info.RequestID]++
	return nil
}

func (g *mailGateway) Has(ctx context.Context, k idem.Key) (bool, error) {
	return g.sent[k.RequestID()] > 0, nil
}

// All runs, as subtests of t, on the stores open opens: the README's test
// as it stands (ReportSentOnce), with the job's own lease of two hours (a
// recovery must not wait for it), and with WaitForTurn (a recovery must not
// wait on a clock that nothing moves); and FailingJob.
func All(t *testing.T, open Open) {
	t.Run("readme", func(t *testing.T) { ReportSentOnce(t, open) })
	t.Run("lease-2h", func(t *testing.T) { ReportSentOnce(t, open, idem.WithLease(2*time.Hour)) })
	t.Run("wait-for-turn", func(t *testing.T) { ReportSentOnce(t, open, idem.WaitForTurn()) })
	t.Run("failing-job", func(t *testing.T) { FailingJob(t, open) })
}

// ReportSentOnce is the README's TestReportSentOnce (idemtest/readme_test.go)
// on the store that open returns, with opts added to the job's Run (none:
// the README's job). It logs how long the scenario took, every crash point
// included, and how much of it opening the stores took (a Postgres schema
// of its own per crash point).
func ReportSentOnce(t *testing.T, open Open, opts ...idem.Option) {
	start, opening := time.Now(), time.Duration(0)
	key := idem.Key{Job: "daily_report", Period: "2026-10-27"}
	idemtest.EveryCrashPoint(t, func(t *testing.T, c *idemtest.Crash) {
		began := time.Now()
		s := open(t) // the README: idem.OpenStateFile
		opening += time.Since(began)
		gw := &mailGateway{sent: map[string]int{}}
		job := func(ctx context.Context) error {
			return s.Run(ctx, key, gw.SendReport, append([]idem.Option{idem.TwoPhase(gw.Has), c.Option()}, opts...)...)
		}
		c.Crash(job) // stopped at c.Point, as a SIGKILL would; a point never reached skips the subtest
		if err := c.Recover(job); err != nil || gw.sent[key.RequestID()] != 1 {
			t.Fatalf("sent %d, err %v", gw.sent[key.RequestID()], err)
		}
	})
	t.Logf("%s: every crash point in %v, of which opening the stores %v", t.Name(),
		time.Since(start).Round(time.Millisecond), opening.Round(time.Millisecond))
}

// FailingJob: under the crash kit, a job whose fn always fails returns its
// error at once, from Crash and from Recover, without idem.OneAttempt:
// each call makes at most one attempt and returns an error matching
// idem.ErrBackingOff (wrapping fn's, when fn ran in it), whether the job
// runs on the kit's clock (which nothing moves) or on the system clock
// (where the engine's default would retry in-process for
// idem.DefaultRetryWithin).
func FailingJob(t *testing.T, open Open) {
	for _, clock := range []string{"kit-clock", "system-clock"} {
		t.Run(clock, func(t *testing.T) {
			key := idem.Key{Job: "daily_report", Period: "2026-10-27"}
			boom := errors.New("mail gateway down")
			idemtest.EveryCrashPoint(t, func(t *testing.T, c *idemtest.Crash) {
				s := open(t)
				calls := 0
				var res idem.Result
				job := func(ctx context.Context) error {
					opts := []idem.Option{idem.ReportTo(&res)}
					if clock == "kit-clock" {
						opts = append(opts, c.Option())
					}
					return s.Run(ctx, key, func(context.Context) error { calls++; return boom }, opts...)
				}
				check := func(what string, err error, before int) {
					t.Helper()
					ran := calls - before
					if ran > 1 || res.Attempts != ran {
						t.Errorf("%s: fn called %d times, %d attempts; want at most one attempt per call", what, ran, res.Attempts)
					}
					if !errors.Is(err, idem.ErrBackingOff) || (ran > 0 && !errors.Is(err, boom)) {
						t.Errorf("%s (fn called %d times): %v; want ErrBackingOff, wrapping fn's error if it ran", what, ran, err)
					}
				}
				reached, err := c.Crash(job)
				if !reached {
					check("the crashed run, which never reached its point", err, 0)
				}
				before := calls
				res = idem.Result{}
				check("the recovery", c.Recover(job), before)
				if calls == 0 {
					t.Errorf("fn never ran")
				}
			})
		})
	}
}
