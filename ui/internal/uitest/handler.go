package uitest

import (
	"io"
	"log/slog"
	"testing"

	"github.com/idemgo/idem/ui"
)

// NewHandler is ui.New on s with o, logging nowhere unless o has a
// Logger; t fails if New does.
func NewHandler(t *testing.T, s ui.Store, o ui.Options) *ui.Handler {
	t.Helper()
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	h, err := ui.New(s, o)
	if err != nil {
		t.Fatal(err)
	}
	return h
}
