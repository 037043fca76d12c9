package main

import (
	"fmt"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/cmd/idem/internal/spec"
	"github.com/idemgo/idem/limit"
)

// limits makes the limits of specs in s, one per name whatever the
// number of lines that name it (a name given two meanings is an error
// naming both); lease is an "at once" limit's.
type limits struct {
	s     idem.Store
	lease time.Duration
	made  map[string]idem.Limiter
	specs map[string]spec.Limit
}

func newLimits(s idem.Store, lease time.Duration) *limits {
	return &limits{s: s, lease: lease, made: map[string]idem.Limiter{}, specs: map[string]spec.Limit{}}
}

// option returns the option of specs: nil for none.
func (ls *limits) option(specs []spec.Limit) (idem.Option, error) {
	if len(specs) == 0 {
		return nil, nil
	}
	var all []idem.Limiter
	for _, sp := range specs {
		if prev, ok := ls.specs[sp.Name]; ok {
			if prev != sp {
				return nil, fmt.Errorf("limit %s is %s and %s: give one limit one meaning everywhere", sp.Name, prev, sp)
			}
			all = append(all, ls.made[sp.Name])
			continue
		}
		var l idem.Limiter
		var err error
		if sp.Max > 0 {
			if ls.lease < time.Second {
				return nil, fmt.Errorf("%s: a place is held by a lease, and --lease %v is under a second", sp, ls.lease)
			}
			l, err = limit.NewAtOnce(ls.s, sp.Name, sp.Max, ls.lease)
		} else {
			l, err = limit.NewRate(ls.s, sp.Name, sp.PerSecond, sp.Burst)
		}
		if err != nil {
			return nil, err
		}
		ls.specs[sp.Name], ls.made[sp.Name] = sp, l
		all = append(all, l)
	}
	return idem.WithLimits(all...), nil
}
