package idem_test

import (
	"path/filepath"
	"testing"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemtest"
)

func TestLedgerConformance(t *testing.T) {
	idemtest.TestStore(t, idemtest.Harness{
		Open: func(t *testing.T, clk idem.Clock) idem.Store {
			return openLedger(t, t.TempDir(), idem.WithClock(clk))
		},
		LeaseExpiry: true,
		Items:       true,
	})
}

func TestStateFileConformance(t *testing.T) {
	idemtest.TestStore(t, idemtest.Harness{
		Open: func(t *testing.T, clk idem.Clock) idem.Store {
			s, err := idem.OpenStateFile(filepath.Join(t.TempDir(), "state.json"), idem.WithClock(clk))
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
		Watermark: true,
	})
}
