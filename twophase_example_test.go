package idem_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemtest"
)

// A report mailed by a job that keeps its state in a JSON file. The mail
// gateway can say whether it already accepted a request id, so the job runs
// TwoPhase: when a run dies between sending the mail and recording it, the
// next run asks the gateway instead of mailing again.
func ExampleTwoPhase() {
	dir, _ := os.MkdirTemp("", "idem-example")
	defer os.RemoveAll(dir)
	s, err := idem.OpenStateFile(filepath.Join(dir, "state.json"))
	if err != nil {
		log.Fatal(err)
	}

	accepted := map[string]int{} // the gateway: mails by request id
	send := func(ctx context.Context) error {
		info, _ := idem.InfoFrom(ctx)
		accepted[info.RequestID]++
		return nil
	}
	has := func(ctx context.Context, k idem.Key) (bool, error) { return accepted[k.RequestID()] > 0, nil }
	key := idem.Key{Job: "daily_report", Period: "2026-10-27"}

	// The first run stops after the mail went out, before its done mark, as
	// a process killed there would.
	err = s.Run(idemtest.CrashAt(context.Background(), idemtest.AfterFn), key, send, idem.TwoPhase(has))
	fmt.Println("first run crashed:", errors.Is(err, idemtest.ErrCrashed))

	var res idem.Result
	err = s.Run(context.Background(), key, send, idem.TwoPhase(has), idem.ReportTo(&res))
	fmt.Println("second run:", res.Outcome, err)
	fmt.Println("mails sent:", accepted[key.RequestID()])
	// Output:
	// first run crashed: true
	// second run: recovered <nil>
	// mails sent: 1
}
