// Package spec reads the values that the idem command's flags and the
// lines of an 'idem serve' crontab share (business calendars, durations,
// catch-up dependencies, shared limits), so that a value means the same in
// both.
package spec

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/idemgo/idem"
)

// NamedSchedule is the business calendar that word names in loc (daily,
// hourly, weekly, monthly, as --schedule takes them); ok is false for any
// other word. 'idem run --schedule' and the business lines of 'idem serve'
// share it, so that their periods and IDEM_PERIOD are the same.
func NamedSchedule(word string, loc *time.Location) (s idem.Schedule, ok bool) {
	switch strings.ToLower(strings.TrimSpace(word)) {
	case "daily", "day":
		return idem.Daily(loc), true
	case "hourly", "hour":
		return idem.Hourly(loc), true
	case "weekly", "week":
		return idem.Weekly(loc), true
	case "monthly", "month":
		return idem.Monthly(loc), true
	}
	return nil, false
}

// ParseDuration is time.ParseDuration that also accepts whole days and
// weeks ("90d", "2w"), for --keep.
func ParseDuration(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	for suffix, unit := range map[string]time.Duration{"d": 24 * time.Hour, "w": 7 * 24 * time.Hour} {
		if n, ok := strings.CutSuffix(s, suffix); ok {
			v, err := strconv.ParseFloat(n, 64)
			if err != nil || !(v >= 0) || v*float64(unit) > math.MaxInt64 { // also NaN, Inf, and more than 290 years
				return 0, fmt.Errorf("invalid duration %q (use e.g. 90d, 2w, 36h, 30m)", s)
			}
			return time.Duration(v * float64(unit)), nil
		}
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("invalid duration %q (use e.g. 90d, 2w, 36h, 30m)", s)
	}
	return d, nil
}
