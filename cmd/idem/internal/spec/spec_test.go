package spec

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestParseDuration(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]time.Duration{
		"90d": 90 * 24 * time.Hour, "2w": 14 * 24 * time.Hour, "36h": 36 * time.Hour, "1.5d": 36 * time.Hour, "30m": 30 * time.Minute,
	} {
		if got, err := ParseDuration(in); err != nil || got != want {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "d", "-1d", "ten days", "-5h"} {
		if _, err := ParseDuration(in); err == nil {
			t.Errorf("ParseDuration(%q): no error", in)
		}
	}
}

// TestLongLimitFlagCut: a --rate or --at-once with a 10 KB name is quoted
// in its error cut short, with its length, not whole.
func TestLongLimitFlagCut(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", 10240)
	for _, v := range []string{long + "=1", long + "=x", long, "a=1," + long} {
		for name, parse := range map[string]func(string) (Limit, error){"--rate": ParseRate, "--at-once": ParseAtOnce} {
			_, err := parse(v)
			if err == nil || len(err.Error()) > 300 || !strings.Contains(err.Error(), " bytes)") {
				t.Errorf("%s of %d bytes: an error of %d bytes; want the value cut short, with its length", name, len(v), len(fmt.Sprint(err)))
			}
		}
	}
}
