package spec

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/idemgo/idem/idemstore"
)

// Limit is a shared limit named on the command line (--rate,
// --at-once) or on a crontab line (rate:, at-once: words).
type Limit struct {
	Name      string
	PerSecond float64 // a rate's; 0 for an "at once" limit
	Burst     int
	Max       int // an "at once" limit's
}

func (s Limit) String() string {
	if s.Max > 0 {
		return fmt.Sprintf("at-once %s=%d", s.Name, s.Max)
	}
	return fmt.Sprintf("rate %s=%v,%d", s.Name, s.PerSecond, s.Burst)
}

// ParseRate reads NAME=PER_SECOND[,BURST] (burst 1 when not given).
func ParseRate(v string) (Limit, error) {
	name, num, ok := strings.Cut(v, "=")
	if !ok || name == "" {
		return Limit{}, fmt.Errorf("%s: want NAME=PER_SECOND[,BURST], like mail=200,20", idemstore.QuotePart(v))
	}
	if err := idemstore.ValidatePart("limit name", name); err != nil {
		return Limit{}, fmt.Errorf("%s: %w", idemstore.QuotePart(v), err)
	}
	rate, burst, hasBurst := strings.Cut(num, ",")
	r, err := strconv.ParseFloat(rate, 64)
	if err != nil || !(r > 0) || r > 1e9 {
		return Limit{}, fmt.Errorf("%s: the rate %s is not a number of starts a second above 0", idemstore.QuotePart(v), idemstore.QuotePart(rate))
	}
	b := 1
	if hasBurst {
		if b, err = strconv.Atoi(burst); err != nil || b < 1 {
			return Limit{}, fmt.Errorf("%s: the burst %s is not a whole number of at least 1", idemstore.QuotePart(v), idemstore.QuotePart(burst))
		}
	}
	return Limit{Name: name, PerSecond: r, Burst: b}, nil
}

// ParseAtOnce reads NAME=MAX.
func ParseAtOnce(v string) (Limit, error) {
	name, num, ok := strings.Cut(v, "=")
	if !ok || name == "" {
		return Limit{}, fmt.Errorf("%s: want NAME=MAX, like report-db=2", idemstore.QuotePart(v))
	}
	if err := idemstore.ValidatePart("limit name", name); err != nil {
		return Limit{}, fmt.Errorf("%s: %w", idemstore.QuotePart(v), err)
	}
	n, err := strconv.Atoi(num)
	if err != nil || n < 1 {
		return Limit{}, fmt.Errorf("%s: the max %s is not a whole number of at least 1", idemstore.QuotePart(v), idemstore.QuotePart(num))
	}
	return Limit{Name: name, Max: n}, nil
}
