package idem_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/idemgo/idem"
)

// TestRunValueRoundTrip: a value that JSON does not carry whole (a field
// tagged `json:"-"`, a set unexported field, an interface that comes back
// as another type) is refused with ErrValueEncoding on the first call,
// naming the field, and the key is parked with nothing stored; values that
// do come back whole (times, maps, nil and empty slices, pointers) are
// stored and replayed equal.
func TestRunValueRoundTrip(t *testing.T) {
	ctx := context.Background()
	l := openLedger(t, t.TempDir())

	type skipped struct {
		A int
		B int `json:"-"`
	}
	type hidden struct {
		A int
		b int
	}
	type loose struct{ N any }

	refuse := func(name string, run func(k idem.Key) error, field string) {
		t.Helper()
		k := idem.Key{Job: "value_" + name, Period: "2026-10-27"}
		err := run(k)
		if !errors.Is(err, idem.ErrValueEncoding) || !errors.Is(err, idem.ErrParked) || !strings.Contains(err.Error(), field) {
			t.Fatalf("%s: first call returned %v; want ErrValueEncoding, parked, naming %s", name, err, field)
		}
		if rec, _, err := l.Lookup(ctx, k); err != nil || rec.Status == idem.StatusDone || len(rec.Value) != 0 {
			t.Fatalf("%s: record after the refused value: %+v, %v; want not done, no value", name, rec, err)
		}
	}
	refuse("skipped", func(k idem.Key) error {
		_, err := idem.RunValueOn(ctx, l, k, func(context.Context) (skipped, error) { return skipped{A: 1, B: 2}, nil })
		return err
	}, ".B")
	refuse("hidden", func(k idem.Key) error {
		_, err := idem.RunValueOn(ctx, l, k, func(context.Context) (hidden, error) { return hidden{A: 1, b: 2}, nil })
		return err
	}, ".b")
	refuse("loose", func(k idem.Key) error {
		_, err := idem.RunValueOn(ctx, l, k, func(context.Context) (loose, error) { return loose{N: 3}, nil })
		return err
	}, ".N")

	// A skipped or unexported field left at its zero value loses nothing.
	k := idem.Key{Job: "value_zero_skipped", Period: "2026-10-27"}
	for i := range 2 {
		v, err := idem.RunValueOn(ctx, l, k, func(context.Context) (skipped, error) { return skipped{A: 1}, nil })
		if err != nil || v != (skipped{A: 1}) {
			t.Fatalf("call %d: %+v, %v; want {A:1}", i, v, err)
		}
	}

	type whole struct {
		At    time.Time
		Since *time.Time
		Tags  map[string][]int
		None  []string
		Empty []string
		Any   any
		Ptr   *int
	}
	at := time.Now() // carries a monotonic reading and the local zone: JSON keeps neither, the instant is the same
	n := 7
	want := whole{At: at, Since: &at, Tags: map[string][]int{"a": {1, 2}}, Empty: []string{}, Any: "text", Ptr: &n}
	k = idem.Key{Job: "value_whole", Period: "2026-10-27"}
	first, err := idem.RunValueOn(ctx, l, k, func(context.Context) (whole, error) { return want, nil })
	if err != nil || !first.At.Equal(at) {
		t.Fatalf("first call: %+v, %v", first, err)
	}
	again, err := idem.RunValueOn(ctx, l, k, func(context.Context) (whole, error) {
		t.Fatal("fn ran for a done key")
		return whole{}, nil
	})
	if err != nil || !again.At.Equal(at) || !again.Since.Equal(at) || again.Tags["a"][1] != 2 || again.Any != "text" || *again.Ptr != 7 {
		t.Fatalf("replayed value: %+v, %v; want %+v", again, err, want)
	}
}
