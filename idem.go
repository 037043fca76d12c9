package idem

import (
	"context"
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
// protocol of [RunOn]: fn runs until the key is done, at most once at a
// time, and not again once it is done.
func Run(ctx context.Context, key Key, fn func(context.Context) error, opts ...Option) error {
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
	return RunOn(ctx, s, key, fn, opts...)
}
