// Package idem makes scheduled jobs idempotent: a job triggered ten times for
// the same business period has the effect of one run, and periods missed
// while the host was down get done.
//
// cron, systemd timers and Kubernetes CronJobs start a job at least once,
// not exactly once: the previous run is still going, a drained node's Pod is
// re-created, a timer catches up after downtime, someone re-runs it by hand.
// Wrap the job's work in Run with a [Key] naming the job and the business
// period the run is for:
//
//	key := idem.Key{Job: "daily_settle", Period: "2026-10-27"}
//	err := idem.Run(ctx, key, func(ctx context.Context) error {
//		return settle(ctx, "2026-10-27")
//	})
//
// Run claims the key in a durable store, runs fn, and marks the key done; a
// second Run of a done key returns nil without running fn. A claim is a
// lease with a fencing token, so a process that dies or stalls cannot finish
// over a newer attempt. What happens when a process dies between fn's effect
// and the done mark depends on the mode: [AtLeastOnce] (the default) runs fn
// again, [AtMostOnce] leaves the key unknown for a person, [TwoPhase] asks
// the downstream. When fn's effect is a write in the ledger's own database,
// [Ledger.RunTx] commits it together with the done mark: exactly once.
//
// Stores: [Ledger] (a SQLite file, one host), [StateFile] (a JSON file, for
// jobs without a database), and the Postgres ledger in the pgledger module
// (many hosts). Package idemtest injects crashes at every protocol step so
// you can prove your own job survives them.
//
// The interfaces a store implements, and the protocol rules the stores
// share, are in package idemstore, for those who write a store; the types
// of it that a job or an operator names (Key, Record, Status, Resolution,
// ...) are here too, under the same names.
package idem

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
)

// EnvLedger is the environment variable that overrides the default ledger's
// path.
const EnvLedger = "IDEM_LEDGER"

var (
	defaultMu    sync.Mutex
	defaultStore Store
)

// SetDefault makes s the store of the package-level [Run]. It is the only
// package-level state in idem, like slog.SetDefault.
func SetDefault(s Store) {
	defaultMu.Lock()
	defer defaultMu.Unlock()
	defaultStore = s
}

// Default returns the store of the package-level [Run]: the one given to
// [SetDefault], or else a [Ledger] opened on first use at [DefaultLedgerPath].
func Default() (Store, error) {
	defaultMu.Lock()
	defer defaultMu.Unlock()
	if defaultStore != nil {
		return defaultStore, nil
	}
	path, err := DefaultLedgerPath()
	if err != nil {
		return nil, err
	}
	if err := mkdirAllSync(filepath.Dir(path)); err != nil {
		return nil, fmt.Errorf("idem: default ledger: %w", err)
	}
	l, err := OpenLedger(path)
	if err != nil {
		return nil, err
	}
	defaultStore = l
	return l, nil
}

// DefaultLedgerPath is where the package-level Run keeps its ledger when
// SetDefault was not called: $IDEM_LEDGER if set, else
// $XDG_STATE_HOME/idem/ledger.db, else ~/.local/state/idem/ledger.db.
func DefaultLedgerPath() (string, error) {
	if p := os.Getenv(EnvLedger); p != "" {
		return p, nil
	}
	if d := os.Getenv("XDG_STATE_HOME"); d != "" {
		return filepath.Join(d, "idem", "ledger.db"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("idem: no default ledger path (set %s): %w", EnvLedger, err)
	}
	return filepath.Join(home, ".local", "state", "idem", "ledger.db"), nil
}

// Run runs fn for key on the default store (see [Default]) with the
// protocol of [RunWith]: fn runs until the key is done, at most once at a
// time, and not again once it is done.
func Run(ctx context.Context, key Key, fn func(context.Context) error, opts ...RunOption) error {
	if err := key.Validate(); err != nil {
		return err
	}
	s, err := Default()
	if err != nil {
		return err
	}
	if l, ok := s.(*Ledger); ok {
		return l.Run(ctx, key, fn, opts...)
	}
	return RunWith(ctx, s, key, fn, opts...)
}

// mkdirAllSync creates dir and its missing parents, and fsyncs the parent of
// each directory it creates so that the new entries survive power loss.
func mkdirAllSync(dir string) error {
	if fi, err := os.Stat(dir); err == nil {
		if !fi.IsDir() {
			return fmt.Errorf("%s is not a directory", dir)
		}
		return nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return err
	}
	parent := filepath.Dir(dir)
	if parent != dir {
		if err := mkdirAllSync(parent); err != nil {
			return err
		}
	}
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	return syncDir(parent)
}
