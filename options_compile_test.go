package idem_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// misuseGood uses every option class in calls it fits: it must build, or
// the failure of misuseBad could have another cause.
const misuseGood = `package good

import (
	"context"
	"database/sql"
	"time"

	"github.com/idemgo/idem"
)

func Use() {
	ctx := context.Background()
	l, err := idem.OpenLedger("ledger.db", idem.WithLease(time.Minute), idem.AtMostOnce(), idem.OneAttempt())
	if err != nil {
		return
	}
	key := idem.Key{Job: "j", Period: "p"}
	items := idem.Items(func(yield func(string) bool) { yield("a") })
	var r idem.Result
	_ = l.Run(ctx, key, func(context.Context) error { return nil },
		idem.AtMostOnce(), idem.RetryWithin(time.Second), idem.ReportTo(&r), idem.WithLogger(nil), idem.WithParams("v3"))
	_ = l.RunTx(ctx, key, func(context.Context, *sql.Tx) error { return nil },
		idem.ReportTo(&r), idem.OneAttempt(), idem.WithLease(time.Minute), idem.WithParamsBytes([]byte("v3")))
	_, _ = idem.Each(ctx, l, key, items, func(context.Context, string) error { return nil },
		idem.WithWorkers(2), idem.AtLeastOnce(), idem.WithBatch(10), idem.OnProgress(func(idem.EachProgress) {}), idem.WithParams(1))
	_, _ = idem.EachTx(ctx, l, key, items, func(context.Context, *sql.Tx, string) error { return nil },
		idem.WithWorkers(2), idem.OnResult(func(idem.Result) {}), idem.WithParams(1))
	_, _ = idem.CatchUp(ctx, l, "j", idem.Daily(time.UTC), func(context.Context, idem.Period) error { return nil },
		idem.CatchUpAll(0), idem.AtMostOnce(), idem.WaitForTurn(), idem.Since(time.Now()), idem.OnPeriod(func(idem.PeriodResult) {}), idem.WithParams(1))
	_, _ = l.CatchUpTx(ctx, "j", idem.Daily(time.UTC), func(context.Context, *sql.Tx, idem.Period) error { return nil },
		idem.CatchUpLatest(), idem.OneAttempt(), idem.DueAtStart(), idem.ContinueAfterFailure(), idem.WithParams(1))
	s := idem.NewScheduler(l, idem.WithMaxRunning(2), idem.WithLogger(nil))
	_ = s.Add("j", idem.Daily(time.UTC), func(context.Context, idem.Period) error { return nil },
		idem.WithJitter(time.Second), idem.AtMostOnce(), idem.CatchUpWindow(time.Hour), idem.DueAfter(time.Hour), idem.OneAttempt(), idem.WithLease(time.Minute), idem.WithParams(1))
	_ = idem.AddTx(s, "t", idem.Daily(time.UTC), func(context.Context, *sql.Tx, idem.Period) error { return nil },
		idem.RunOverlapping(), idem.WithLagTolerance(time.Hour), idem.CatchUpLatest(), idem.OnResult(func(idem.Result) {}), idem.WithParamsBytes([]byte("v3")), idem.WithGuard(idem.MemoryGuard{}))
	_, _ = idem.RunValueWith(ctx, l, key, func(context.Context) (int, error) { return 1, nil }, idem.WithParams(1), idem.AtMostOnce())
	_ = s.AddRelay("r", l, idem.Webhook("http://localhost", nil), idem.RelayBatch(8), idem.RelayLease(time.Minute), idem.RelayPoll(time.Second),
		idem.RelayRetention(time.Hour), idem.RelayBackoff(idem.DefaultBackoff()), idem.RelayLogger(nil), idem.OnDelivery(func(idem.DeliveryResult) {}))
	_, _ = idem.RelayOnce(ctx, l, idem.DeliverFunc(func(context.Context, idem.Delivery) error { return nil }), idem.RelayClock(nil), idem.RelayOwner("me"))
}
`

// misuseBad passes options to calls they mean nothing for, one per line
// after the marker: each must be a compile error.
const misuseBad = `package bad

import (
	"context"
	"database/sql"
	"time"

	"github.com/idemgo/idem"
)

func Use() {
	ctx := context.Background()
	l, _ := idem.OpenLedger("ledger.db")
	key := idem.Key{Job: "j", Period: "p"}
	items := idem.Items(func(yield func(string) bool) { yield("a") })
	var r idem.Result
	_ = time.Second
	// misuses:
	_ = l.Run(ctx, key, func(context.Context) error { return nil }, idem.WithWorkers(2))
	_, _ = idem.Each(ctx, l, key, items, func(context.Context, string) error { return nil }, idem.ReportTo(&r))
	_ = l.RunTx(ctx, key, func(context.Context, *sql.Tx) error { return nil }, idem.AtMostOnce())
	_, _ = idem.Each(ctx, l, key, items, func(context.Context, string) error { return nil }, idem.CatchUpAll(10))
	_ = idem.NewScheduler(l).Add("j", idem.Daily(time.UTC), func(context.Context, idem.Period) error { return nil }, idem.ReportTo(&r))
	_ = idem.AddTx(idem.NewScheduler(l), "j", idem.Daily(time.UTC), func(context.Context, *sql.Tx, idem.Period) error { return nil }, idem.AtMostOnce())
	_ = l.Run(ctx, key, func(context.Context) error { return nil }, idem.WithJitter(time.Second))
	_ = idem.NewScheduler(l, idem.WithWorkers(2))
	_, _ = idem.OpenLedger("ledger.db", idem.WithParams(1))
	_ = idem.NewScheduler(l, idem.WithParams(1))
	_, _ = idem.RelayOnce(ctx, l, idem.Webhook("http://localhost", nil), idem.WithClock(nil))
}
`

// TestMisusedOptionDoesNotCompile: an option passed to a call it means
// nothing for does not compile, and the compiler's message names the
// option's class and the interface the call wants. A program using every
// option where it fits builds, with the same module set-up.
func TestMisusedOptionDoesNotCompile(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds programs with the go command")
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go command: %v", err)
	}
	root, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	files := map[string]string{
		"go.mod": "module misuse\n\ngo 1.26\n\nrequire github.com/idemgo/idem v0.0.0\n\n" +
			"replace github.com/idemgo/idem => " + root + "\n",
		"go.sum":       string(sum),
		"good/good.go": misuseGood,
		"bad/bad.go":   misuseBad,
	}
	for name, text := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	build := func(pkg string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		// Library packages: go build type-checks and compiles them, and
		// links nothing. -e: every error, not the first ten.
		cmd := exec.CommandContext(ctx, gobin, "build", "-gcflags=-e", pkg)
		cmd.Dir = dir
		// The module cache and build cache are this test's own (inherited);
		// nothing is downloaded.
		cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOPROXY=off", "GOWORK=off", "GOTOOLCHAIN=local")
		out, err := cmd.CombinedOutput()
		if ctx.Err() != nil {
			t.Fatalf("go build %s did not finish within 10 minutes; output so far:\n%s", pkg, out)
		}
		return string(out), err
	}
	if out, err := build("./good"); err != nil {
		t.Fatalf("the program using options where they fit does not build: %v\n%s", err, out)
	}
	out, err := build("./bad")
	var exit *exec.ExitError
	if !errors.As(err, &exit) {
		t.Fatalf("go build ./bad: %v, want a compile failure\n%s", err, out)
	}
	t.Logf("go build ./bad:\n%s", out)
	want := []string{
		"bad/bad.go:19:", "idem.FanOutOption does not implement idem.RunOption",
		"bad/bad.go:20:", "idem.ReportOption does not implement idem.EachOption",
		"bad/bad.go:21:", "idem.ModeOption does not implement idem.RunTxOption",
		"bad/bad.go:22:", "idem.CatchUpPolicy does not implement idem.EachOption",
		"bad/bad.go:23:", "idem.ReportOption does not implement idem.JobOption",
		"bad/bad.go:24:", "idem.ModeOption does not implement idem.JobTxOption",
		"bad/bad.go:25:", "idem.JobSetting does not implement idem.RunOption",
		"bad/bad.go:26:", "idem.FanOutOption does not implement idem.SchedulerOption",
		"bad/bad.go:27:", "idem.ParamsOption does not implement idem.StoreOption",
		"bad/bad.go:28:", "idem.ParamsOption does not implement idem.SchedulerOption",
		"bad/bad.go:29:", "idem.Option does not implement idem.RelayOption",
	}
	lines := strings.Split(out, "\n")
	for i := 0; i < len(want); i += 2 {
		found := false
		for _, l := range lines {
			if strings.Contains(l, want[i]) && strings.Contains(l, want[i+1]) {
				found = true
			}
		}
		if !found {
			t.Errorf("no compile error at %s saying %q", want[i], want[i+1])
		}
	}
	if n := strings.Count(out, "does not implement"); n != 11 {
		t.Errorf("%d compile errors about options, want 11", n)
	}
}
