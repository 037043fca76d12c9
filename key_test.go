package idem_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemstore"
)

// TestInvalidKeyErrorIsShort: an invalid key of 10 KB (or of 10 KB of NUL
// bytes, each escaped as 4 characters) is named in the error by its first
// bytes and its length, not echoed whole.
func TestInvalidKeyErrorIsShort(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l := openLedger(t, t.TempDir())
	s := openState(t, t.TempDir())
	long := strings.Repeat("x", 10240)
	nul := strings.Repeat("\x00", 10240)
	fn := func(context.Context) error { t.Error("fn ran"); return nil }
	for _, c := range []struct {
		name string
		call func() error
	}{
		{"Validate, long job", func() error { return idem.Key{Job: long, Period: "2026-10-27"}.Validate() }},
		{"Validate, NUL period", func() error { return idem.Key{Job: "j", Period: nul}.Validate() }},
		{"Validate, both", func() error { return idem.Key{Job: nul, Period: long}.Validate() }},
		{"ValidateJob, NUL", func() error { return idemstore.ValidateJob(nul) }},
		{"ledger Run", func() error { return l.Run(ctx, idem.Key{Job: long, Period: nul}, fn) }},
		{"state file Run", func() error { return s.Run(ctx, idem.Key{Job: nul, Period: "2026-10-27"}, fn) }},
		{"Resolve", func() error { return l.Resolve(ctx, idem.Key{Job: "j", Period: nul}, idem.ResolveDone) }},
		{"CatchUp", func() error {
			_, err := idem.CatchUp(ctx, l, nul, idem.Daily(time.UTC), func(context.Context, idem.Period) error { return nil })
			return err
		}},
		{"Each", func() error {
			_, err := idem.Each(ctx, l, idem.Key{Job: long, Period: "2026-10-27"}, func(yield func(string, error) bool) { yield("a", nil) },
				func(context.Context, string) error { return nil })
			return err
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := c.call()
			if !errors.Is(err, idem.ErrInvalidKey) {
				t.Fatalf("%v, want ErrInvalidKey", err)
			}
			msg := err.Error()
			if len(msg) > 800 || !strings.Contains(msg, "(10240 bytes)") {
				t.Fatalf("message of %d bytes, want at most 800 naming the length (10240 bytes): %.300q", len(msg), msg)
			}
		})
	}
	// A short key is quoted whole, escaped.
	err := idem.Key{Job: "job\n", Period: "2026-10-27"}.Validate()
	if want := `idem: invalid key "job\n"/"2026-10-27": job has a control character U+000A at byte 3`; err == nil || err.Error() != want {
		t.Fatalf("%v, want %s", err, want)
	}
	// A multi-byte character is not cut in half.
	err = idem.Key{Job: strings.Repeat("é", 300), Period: "p"}.Validate()
	if err == nil || !strings.Contains(err.Error(), `"`+strings.Repeat("é", 32)+`"… (600 bytes)`) {
		t.Fatalf("%v, want 32 whole é and the length", err)
	}
}

// TestCatchUpInvalidJob: CatchUp names the job it was given and what is
// wrong with it, with no period (there is none).
func TestCatchUpInvalidJob(t *testing.T) {
	t.Parallel()
	l := openLedger(t, t.TempDir())
	_, err := idem.CatchUp(context.Background(), l, "", idem.Daily(time.UTC), func(context.Context, idem.Period) error { return nil })
	if want := `idem: invalid job "": job is empty`; err == nil || err.Error() != want || !errors.Is(err, idem.ErrInvalidKey) {
		t.Fatalf("%v, want %s", err, want)
	}
	_, err = idem.CatchUp(context.Background(), l, "a\tb", idem.Daily(time.UTC), func(context.Context, idem.Period) error { return nil })
	if err == nil || strings.Contains(err.Error(), `"-"`) || !strings.Contains(err.Error(), `"a\tb"`) {
		t.Fatalf("%v, want the job and no placeholder period", err)
	}
}
