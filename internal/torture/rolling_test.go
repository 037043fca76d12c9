package main

import (
	"bytes"
	"path/filepath"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/internal/torture/harness"
)

// TestRollingUpgrade runs the previous release's workers (built from git
// history: the commit before the last schema change) and this tree's
// together on one SQLite ledger, with SIGKILLs of random workers and their
// restarts: from an empty ledger created by this tree (the old workers
// open a ledger one version newer than theirs), with RunTx (no key's effect
// twice), and from a ledger created by the old workers, which this tree's
// then migrate while they run, with Run AtLeastOnce (duplicates only around
// kills, as the torture checker allows). Every key must end done, and no
// worker may exit with an error (ErrNewerSchema in particular).
func TestRollingUpgrade(t *testing.T) {
	old := harness.OldWorker(t, harness.Release{File: "ledger_schema.go", Version: idem.SchemaVersion, Pkg: "./internal/torture"})
	for _, c := range []struct {
		name, mode string
		oldCreates bool
	}{
		{"new-ledger/tx", "tx", false},
		{"old-ledger/atleastonce", "atleastonce", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			var out bytes.Buffer
			seed := time.Now().UnixNano()
			dir := t.TempDir()
			s, err := harness.Run(harness.Config{
				Store: "sqlite", Mode: c.mode,
				Kills: 20, Keys: 200, Workers: 4,
				Exes: []string{old, ""}, FirstCreates: c.oldCreates,
				Seed: seed, Duration: 8 * time.Second, Settle: settleFor(t, 2, 8*time.Second),
				Dir: dir, Lease: 100 * time.Millisecond, Stall: 30 * time.Second,
				Out: &out,
			})
			if err != nil {
				t.Fatalf("seed %d: %v\n%s", seed, err, out.String())
			}
			if s.Violations > 0 || s.Lost > 0 || s.Unknown > 0 || len(s.Errors) > 0 {
				t.Fatalf("seed %d: violations=%d lost=%d unknown=%d errors=%d\n%s", seed, s.Violations, s.Lost, s.Unknown, len(s.Errors), out.String())
			}
			if s.Effects == 0 || s.Kills == 0 {
				t.Fatalf("seed %d: effects=%d kills=%d: the run tested nothing\n%s", seed, s.Effects, s.Kills, out.String())
			}
			l, err := idem.OpenLedger(filepath.Join(dir, "ledger.db"))
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			var v int
			if err := l.DB().QueryRow(`SELECT value FROM idem_meta WHERE name = 'schema_version'`).Scan(&v); err != nil || v != idem.SchemaVersion {
				t.Fatalf("the ledger's version at the end: %d (%v), want %d", v, err, idem.SchemaVersion)
			}
			t.Log(s.Line())
		})
	}
}
