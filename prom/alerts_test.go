package prom_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/internal/schedtest"
	"github.com/idemgo/idem/outbox"
	"github.com/idemgo/idem/prom"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

const (
	rulesFile     = "alerts/idem.rules.yml"
	rulesTestFile = "alerts/tests/idem.rules.test.yml"
	dashboardFile = "alerts/idem-dashboard.json"
)

// promtool returns the path of promtool. Without it the test is skipped,
// saying how to install it, except under CI (CI=true), where it fails.
func promtool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err == nil {
		return p
	}
	msg := "promtool not found (" + err.Error() + "): install it with `apt-get install prometheus` (Debian, Ubuntu) or from a Prometheus release"
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// runPromtool runs promtool with args and fails with its output if it
// does not exit 0.
func runPromtool(t *testing.T, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, promtool(t), args...).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// TestAlertRules: the rules are valid (promtool check rules), and each
// alert fires, and does not fire, where alerts/tests/idem.rules.test.yml
// says (promtool test rules).
func TestAlertRules(t *testing.T) {
	runPromtool(t, "check", "rules", rulesFile)
	runPromtool(t, "test", "rules", rulesTestFile)
}

// collectorRegistry builds every collector of the package on a real SQLite
// ledger with a parked key (job broken) and an unknown one (job pay),
// pending outbox messages and a Scheduler that has run its job, records a
// result of every outcome, and returns the registry.
func collectorRegistry(t *testing.T) *prometheus.Registry {
	t.Helper()
	ctx := context.Background()
	l, err := idem.OpenLedger(filepath.Join(t.TempDir(), "ledger.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	reg := prometheus.NewRegistry()
	m, err := prom.New(reg, prom.WithLister(l))
	if err != nil {
		t.Fatal(err)
	}
	o, err := prom.NewOutbox(reg)
	if err != nil {
		t.Fatal(err)
	}
	o.Watch(l)
	boom := errors.New("boom")
	noWait := idem.WithBackoff(idem.MaxAttempts(2, idem.Constant(0)))
	if err := l.Run(ctx, idem.Key{Job: "broken", Period: "2026-10-27"}, func(context.Context) error { return boom }, noWait, m.Option()); !errors.Is(err, idem.ErrParked) {
		t.Fatalf("broken: %v, want ErrParked", err)
	}
	if err := l.Run(ctx, idem.Key{Job: "pay", Period: "2026-10-27"}, func(context.Context) error { return boom }, idem.AtMostOnce(), m.Option()); !errors.Is(err, idem.ErrUnknownOutcome) {
		t.Fatalf("pay: %v, want ErrUnknownOutcome", err)
	}
	if err := l.Run(ctx, idem.Key{Job: "settle", Period: "2026-10-27"}, func(context.Context) error { return nil }, m.Option()); err != nil {
		t.Fatal(err)
	}
	// Every outcome, as Run, CatchUp and Each report them: a deferral by
	// the breaker and by a limit, a fan-out period with items.
	for o := idem.Outcome(1); !strings.HasPrefix(o.String(), "Outcome("); o++ {
		r := idem.Result{Key: idem.Key{Job: "all", Period: "2026-10-27"}, Outcome: o, Attempts: 2, Duration: time.Second}
		switch o {
		case idem.Deferred:
			m.Observe(idem.Result{Key: r.Key, Outcome: o, Err: &idem.Deferral{Reason: idem.ReasonBreaker}})
			r.Err = &idem.Deferral{Reason: "limit mail"}
		case idem.Ran:
			r.Items = idem.ItemCounts{Done: 3, Parked: 1}
		default:
			r.Err = boom
		}
		m.Observe(r)
	}
	o.ObserveDelivery(outbox.DeliveryResult{Delivery: outbox.Delivery{Topic: "mail"}, Outcome: outbox.DeliverySent})
	err = l.RunTx(ctx, idem.Key{Job: "settle", Period: "2026-10-28"}, func(ctx context.Context, tx *sql.Tx) error {
		_, err := outbox.Put(ctx, tx, outbox.Message{Topic: "mail", Payload: []byte("x")})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	clk := schedtest.NewClock(time.Date(2026, 3, 1, 10, 30, 0, 0, time.UTC))
	s := idem.NewScheduler(l, idem.WithClock(clk))
	if err := s.Add("hourly", idem.Hourly(time.UTC), func(context.Context, idem.Period) error { return nil }, idem.WithLagTolerance(time.Hour)); err != nil {
		t.Fatal(err)
	}
	m.WatchScheduler(s)
	done := make(chan error, 1)
	go func() { done <- s.Run(context.Background()) }()
	t.Cleanup(func() {
		_ = s.Shutdown(context.Background())
		<-done
	})
	schedtest.Idle(t, s, clk.Now())
	return reg
}

// exportedNames returns the series names a registry exposes: a
// histogram's as _bucket, _sum and _count.
func exportedNames(t *testing.T, reg *prometheus.Registry) map[string]bool {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	names := map[string]bool{}
	for _, mf := range mfs {
		if len(mf.GetMetric()) == 0 {
			continue
		}
		if mf.GetType() == dto.MetricType_HISTOGRAM {
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				names[mf.GetName()+suffix] = true
			}
			continue
		}
		names[mf.GetName()] = true
	}
	return names
}

var (
	exprLine = regexp.MustCompile(`(?m)^\s*expr:\s*(.+)$`)
	quoted   = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)
	// A metric name of the collector: idem_ and what a Prometheus name may
	// hold.
	metricName = regexp.MustCompile(`\bidem_[a-zA-Z0-9_:]*`)
)

// seriesOf returns the idem_ metric names an expression reads (label
// values, in quotes, left out).
func seriesOf(expr string) []string {
	return metricName.FindAllString(quoted.ReplaceAllString(expr, `""`), -1)
}

// dashboardExprs returns every targets[].expr of the dashboard's panels.
func dashboardExprs(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		SchemaVersion int `json:"schemaVersion"`
		Panels        []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Name, Type string
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	if d.SchemaVersion == 0 || !slices.ContainsFunc(d.Templating.List, func(v struct{ Name, Type string }) bool { return v.Type == "datasource" }) {
		t.Errorf("%s: want a schemaVersion and a datasource template variable", dashboardFile)
	}
	var exprs []string
	for _, p := range d.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("%s: panel %q has no query", dashboardFile, p.Title)
		}
		for _, tg := range p.Targets {
			exprs = append(exprs, tg.Expr)
		}
	}
	return exprs
}

// TestAlertSeriesExported: every series that an alert rule or a dashboard
// query reads is one the real collector exports, on a real ledger.
func TestAlertSeriesExported(t *testing.T) {
	names := exportedNames(t, collectorRegistry(t))
	rules, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	sources := map[string][]string{}
	for _, m := range exprLine.FindAllStringSubmatch(string(rules), -1) {
		sources[rulesFile] = append(sources[rulesFile], m[1])
	}
	sources[dashboardFile] = dashboardExprs(t)
	for file, exprs := range sources {
		if len(exprs) == 0 {
			t.Errorf("%s: no expression found", file)
		}
		for _, e := range exprs {
			used := seriesOf(e)
			if len(used) == 0 {
				t.Errorf("%s: %q reads no idem_ series", file, e)
			}
			for _, n := range used {
				if !names[n] {
					t.Errorf("%s: %q reads %s, which the collector does not export", file, e, n)
				}
			}
		}
	}
	if t.Failed() {
		t.Logf("the collector exports: %v", slices.Sorted(func(yield func(string) bool) {
			for n := range names {
				if !yield(n) {
					return
				}
			}
		}))
	}
}

// TestParkedAlertOnCollectorOutput: the IdemKeyParked rule fires on the
// idem_keys series the real collector exports for a parked key (job
// broken), and not for a job with none parked (settle): promtool's input
// series are written from a Gather, not by hand.
func TestParkedAlertOnCollectorOutput(t *testing.T) {
	bin := promtool(t)
	mfs, err := collectorRegistry(t).Gather()
	if err != nil {
		t.Fatal(err)
	}
	var input strings.Builder
	for _, mf := range mfs {
		if mf.GetName() != "idem_keys" {
			continue
		}
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, lp := range m.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", lp.GetName(), lp.GetValue()))
			}
			fmt.Fprintf(&input, "      - series: '%s{%s}'\n        values: '%gx5'\n", mf.GetName(), strings.Join(labels, ","), m.GetGauge().GetValue())
		}
	}
	if !strings.Contains(input.String(), `job="broken",status="parked"`) {
		t.Fatalf("no idem_keys series of the parked key in the collector's output:\n%s", input.String())
	}
	rules, err := filepath.Abs(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	test := `rule_files:
  - ` + rules + `
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
` + input.String() + `    alert_rule_test:
      - eval_time: 2m
        alertname: IdemKeyParked
        exp_alerts:
          - exp_labels: {severity: page, job: broken, status: parked}
            exp_annotations:
              summary: "idem job broken: 1 key(s) parked"
              description: "A period of broken failed every attempt and idem stopped retrying it: it stays parked until a person resets it. First run ` + "`idem ls --job broken --status parked`" + ` (the last error is in the note), fix the cause, then ` + "`idem reset broken PERIOD`" + ` (a Go service: Ledger.Reset)."
      - eval_time: 2m
        alertname: IdemKeyUnknown
        exp_alerts:
          - exp_labels: {severity: page, job: pay, status: unknown}
            exp_annotations:
              summary: "idem job pay: 1 key(s) with an unknown outcome"
              description: "An at-most-once period of pay died or failed halfway: idem cannot tell whether its work happened and will not run it again by itself. First run ` + "`idem ls --job pay --status unknown`, then `idem show pay PERIOD`" + `, check whether the work happened, and ` + "`idem resolve pay PERIOD --done`" + ` (it did) or ` + "`--retry`" + ` (it did not)."
`
	path := filepath.Join(t.TempDir(), "collector.test.yml")
	if err := os.WriteFile(path, []byte(test), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, bin, "test", "rules", path).CombinedOutput(); err != nil {
		t.Fatalf("promtool test rules on the collector's series: %v\n%s\n%s", err, out, test)
	}
}
