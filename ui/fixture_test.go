package ui_test

import (
	"os"
	"testing"

	"github.com/idemgo/idem/ui/internal/uitest"
)

// EnvFixture names where TestWriteFixture writes the fixture's ledger
// (scripts/screenshots.sh); without it the test is skipped.
const EnvFixture = "IDEM_UI_FIXTURE"

// TestWriteFixture writes the screenshots' ledger at $IDEM_UI_FIXTURE.
func TestWriteFixture(t *testing.T) {
	path := os.Getenv(EnvFixture)
	if path == "" {
		t.Skip("$" + EnvFixture + " is not set: scripts/screenshots.sh sets it to write the screenshots' ledger")
	}
	f := uitest.NewFixtureAt(t, path, true)
	if err := f.Ledger.Close(); err != nil {
		t.Fatal(err)
	}
}
