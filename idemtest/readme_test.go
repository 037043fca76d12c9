package idemtest_test

// The test that docs/testing.md shows ("Testing your own job"), compiled and
// run here.

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemtest"
)

// mailGateway is a fake mail gateway: it counts the reports it accepted, by
// request id.
type mailGateway struct{ sent map[string]int }

func (g *mailGateway) SendReport(ctx context.Context) error {
	info, _ := idem.InfoFrom(ctx)
	g.sent[info.RequestID]++
	return nil
}

func (g *mailGateway) Has(ctx context.Context, k idem.Key) (bool, error) {
	return g.sent[k.RequestID()] > 0, nil
}

func TestReportSentOnce(t *testing.T) {
	key := idem.Key{Job: "daily_report", Period: "2026-10-27"}
	idemtest.EveryCrashPoint(t, func(t *testing.T, c *idemtest.Crash) {
		s, err := idem.OpenStateFile(filepath.Join(t.TempDir(), "state.json"))
		if err != nil {
			t.Fatal(err)
		}
		gw := &mailGateway{sent: map[string]int{}}
		job := func(ctx context.Context) error {
			return s.Run(ctx, key, gw.SendReport, idem.TwoPhase(gw.Has), c.Option())
		}
		c.Crash(job) // stopped at c.Point, as a SIGKILL would; a point never reached skips the subtest
		if err := c.Recover(job); err != nil || gw.sent[key.RequestID()] != 1 {
			t.Fatalf("sent %d, err %v", gw.sent[key.RequestID()], err)
		}
	})
}
