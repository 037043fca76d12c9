package idem_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idemgo/idem"
)

// copyTestdata copies testdata/name into a new temporary directory and
// returns its path there.
func copyTestdata(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// checkUpgraded: the three records that the old version wrote
// (daily_settle 2026-10-26 and 2026-10-27 done, 2026-10-28 failed with
// "bank closed") are there, without fingerprint or value, and the store
// takes both from then on.
func checkUpgraded(t *testing.T, s idem.Store) {
	t.Helper()
	ctx := context.Background()
	done := idem.Key{Job: "daily_settle", Period: "2026-10-27"}
	rec, ok, err := s.Lookup(ctx, done)
	if err != nil || !ok || rec.Status != idem.StatusDone || rec.Fingerprint != "" || rec.Value != nil {
		t.Fatalf("upgraded done record: %+v, %v, %v", rec, ok, err)
	}
	failed := idem.Key{Job: "daily_settle", Period: "2026-10-28"}
	if rec, ok, err := s.Lookup(ctx, failed); err != nil || !ok || rec.Status != idem.StatusFailed || rec.LastError != "bank closed" || rec.Failures != 1 {
		t.Fatalf("upgraded failed record: %+v, %v, %v", rec, ok, err)
	}
	var res idem.Result
	if err := idem.RunWith(ctx, s, done, func(context.Context) error { return errors.New("ran") },
		idem.WithParams("rates-v9"), idem.ReportTo(&res)); err != nil || res.Outcome != idem.AlreadyDone {
		t.Fatalf("Run of an upgraded done key with params: %v, %v; want AlreadyDone (no check)", err, res.Outcome)
	}
	if _, err := idem.RunValueWith(ctx, s, done, func(context.Context) (int, error) { return 1, nil }); !errors.Is(err, idem.ErrNoValue) {
		t.Fatalf("RunValue of an upgraded done key: %v, want ErrNoValue", err)
	}
	// The failed period, run now with params, takes them and a value.
	v, err := idem.RunValueWith(ctx, s, failed, func(context.Context) (string, error) { return "EUR 1,234.56", nil },
		idem.WithParams("rates-v9"), idem.WithBackoff(idem.Constant(0)))
	if err != nil && !errors.Is(err, idem.ErrBackingOff) {
		t.Fatalf("RunValue of the upgraded failed key: %v", err)
	}
	if err != nil {
		// Its backoff, from the old version's run, still holds: resolve it.
		if err := s.Resolve(ctx, failed, idem.ResolveRetry); err != nil {
			t.Fatal(err)
		}
		if v, err = idem.RunValueWith(ctx, s, failed, func(context.Context) (string, error) { return "EUR 1,234.56", nil },
			idem.WithParams("rates-v9")); err != nil {
			t.Fatalf("RunValue after Reset: %v", err)
		}
	}
	if v != "EUR 1,234.56" {
		t.Fatalf("value %q", v)
	}
	if _, err := idem.RunValueWith(ctx, s, failed, func(context.Context) (string, error) { return "", nil },
		idem.WithParams("rates-v10")); !errors.Is(err, idem.ErrParamsMismatch) {
		t.Fatalf("other params: %v, want ErrParamsMismatch", err)
	}
	if got, err := idem.RunValueWith(ctx, s, failed, func(context.Context) (string, error) { return "", nil }); err != nil || got != v {
		t.Fatalf("duplicate trigger: %q, %v; want %q", got, err, v)
	}
}

// TestLedgerUpgradeFromVersion3: a ledger file that version 3 wrote
// (testdata/ledger-v3.db) opens, is upgraded to this version, and keeps
// every record.
func TestLedgerUpgradeFromVersion3(t *testing.T) {
	t.Parallel()
	p := copyTestdata(t, "ledger-v3.db")
	l, err := idem.OpenLedger(p)
	if err != nil {
		t.Fatalf("OpenLedger of a version-3 ledger: %v", err)
	}
	defer l.Close()
	var v int
	if err := l.DB().QueryRow(`SELECT value FROM idem_meta WHERE name = 'schema_version'`).Scan(&v); err != nil || v != idem.SchemaVersion {
		t.Fatalf("version %d, %v; want %d", v, err, idem.SchemaVersion)
	}
	if recs, err := l.List(context.Background(), idem.Filter{}); err != nil || len(recs) != 3 {
		t.Fatalf("List: %d records, %v; want 3", len(recs), err)
	}
	checkUpgraded(t, l)
}

// TestStateFileUpgradeFromVersion1: a version-1 state file
// (testdata/state-v1.json) is read, and written back as version 2 at its
// first change.
func TestStateFileUpgradeFromVersion1(t *testing.T) {
	t.Parallel()
	p := copyTestdata(t, "state-v1.json")
	s, err := idem.OpenStateFile(p)
	if err != nil {
		t.Fatalf("OpenStateFile of a version-1 file: %v", err)
	}
	checkUpgraded(t, s)
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"version": 2`, `"doneFingerprint": "`, `"doneValue": "`} {
		if !bytes.Contains(b, []byte(want)) {
			t.Fatalf("state file lacks %s:\n%s", want, b)
		}
	}
	if strings.Contains(string(b), `"version": 1`) {
		t.Fatalf("state file still says version 1:\n%s", b)
	}
}
