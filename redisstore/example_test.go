package redisstore_test

import (
	"context"
	"errors"
	"log"
	"os"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/redisstore"
)

// A daily report mailed once per business day, from any number of hosts
// that share a Redis server (with appendonly yes and appendfsync always).
// (Compiled, not run: it needs a server.)
func Example() {
	ctx := context.Background()
	s, err := redisstore.Open(ctx, os.Getenv("REPORT_REDIS_URL")) // redis://host:6379/0
	if errors.Is(err, redisstore.ErrWeakDurability) {
		log.Fatalf("%v (or open with redisstore.AllowWeakDurability() to accept the loss)", err)
	}
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()

	day := "2026-10-27" // the business day the report is for, not the time it runs
	err = s.Run(ctx, idem.Key{Job: "daily_report", Period: day}, func(ctx context.Context) error {
		info, _ := idem.InfoFrom(ctx)
		return sendReport(ctx, day, info.RequestID) // the mail gateway dedupes by the request id
	}, idem.TwoPhase(reportSent))
	switch {
	case errors.Is(err, idem.ErrInProgress):
		log.Printf("%s: another host is sending it", day)
	case err != nil:
		log.Fatal(err)
	}
}

func sendReport(ctx context.Context, day, requestID string) error { return nil }

func reportSent(ctx context.Context, k idem.Key) (bool, error) { return false, nil }
