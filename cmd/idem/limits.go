package main

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemstore"
	"github.com/idemgo/idem/limit"
)

// limitSpec is a shared limit named on the command line (--rate,
// --at-once) or on a crontab line (rate:, at-once: words).
type limitSpec struct {
	name      string
	perSecond float64 // a rate's; 0 for an "at once" limit
	burst     int
	max       int // an "at once" limit's
}

func (s limitSpec) String() string {
	if s.max > 0 {
		return fmt.Sprintf("at-once %s=%d", s.name, s.max)
	}
	return fmt.Sprintf("rate %s=%v,%d", s.name, s.perSecond, s.burst)
}

// parseRate reads NAME=PER_SECOND[,BURST] (burst 1 when not given).
func parseRate(v string) (limitSpec, error) {
	name, num, ok := strings.Cut(v, "=")
	if !ok || name == "" {
		return limitSpec{}, fmt.Errorf("%s: want NAME=PER_SECOND[,BURST], like mail=200,20", idemstore.QuotePart(v))
	}
	if err := idemstore.ValidatePart("limit name", name); err != nil {
		return limitSpec{}, fmt.Errorf("%s: %w", idemstore.QuotePart(v), err)
	}
	rate, burst, hasBurst := strings.Cut(num, ",")
	r, err := strconv.ParseFloat(rate, 64)
	if err != nil || !(r > 0) || r > 1e9 {
		return limitSpec{}, fmt.Errorf("%s: the rate %s is not a number of starts a second above 0", idemstore.QuotePart(v), idemstore.QuotePart(rate))
	}
	b := 1
	if hasBurst {
		if b, err = strconv.Atoi(burst); err != nil || b < 1 {
			return limitSpec{}, fmt.Errorf("%s: the burst %s is not a whole number of at least 1", idemstore.QuotePart(v), idemstore.QuotePart(burst))
		}
	}
	return limitSpec{name: name, perSecond: r, burst: b}, nil
}

// parseAtOnce reads NAME=MAX.
func parseAtOnce(v string) (limitSpec, error) {
	name, num, ok := strings.Cut(v, "=")
	if !ok || name == "" {
		return limitSpec{}, fmt.Errorf("%s: want NAME=MAX, like report-db=2", idemstore.QuotePart(v))
	}
	if err := idemstore.ValidatePart("limit name", name); err != nil {
		return limitSpec{}, fmt.Errorf("%s: %w", idemstore.QuotePart(v), err)
	}
	n, err := strconv.Atoi(num)
	if err != nil || n < 1 {
		return limitSpec{}, fmt.Errorf("%s: the max %s is not a whole number of at least 1", idemstore.QuotePart(v), idemstore.QuotePart(num))
	}
	return limitSpec{name: name, max: n}, nil
}

// limits makes the limits of specs in s, one per name whatever the
// number of lines that name it (a name given two meanings is an error
// naming both); lease is an "at once" limit's.
type limits struct {
	s     idem.Store
	lease time.Duration
	made  map[string]idem.Limiter
	specs map[string]limitSpec
}

func newLimits(s idem.Store, lease time.Duration) *limits {
	return &limits{s: s, lease: lease, made: map[string]idem.Limiter{}, specs: map[string]limitSpec{}}
}

// option returns the option of specs: nil for none.
func (ls *limits) option(specs []limitSpec) (idem.Option, error) {
	if len(specs) == 0 {
		return nil, nil
	}
	var all []idem.Limiter
	for _, sp := range specs {
		if prev, ok := ls.specs[sp.name]; ok {
			if prev != sp {
				return nil, fmt.Errorf("limit %s is %s and %s: give one limit one meaning everywhere", sp.name, prev, sp)
			}
			all = append(all, ls.made[sp.name])
			continue
		}
		var l idem.Limiter
		var err error
		if sp.max > 0 {
			if ls.lease < time.Second {
				return nil, fmt.Errorf("%s: a place is held by a lease, and --lease %v is under a second", sp, ls.lease)
			}
			l, err = limit.NewAtOnce(ls.s, sp.name, sp.max, ls.lease)
		} else {
			l, err = limit.NewRate(ls.s, sp.name, sp.perSecond, sp.burst)
		}
		if err != nil {
			return nil, err
		}
		ls.specs[sp.name], ls.made[sp.name] = sp, l
		all = append(all, l)
	}
	return idem.WithLimits(all...), nil
}
