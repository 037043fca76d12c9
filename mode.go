package idem

import "context"

// mode is the recovery policy: what to do when an attempt may have had its
// effect but was not marked done.
type mode struct {
	name  string
	rerun bool          // answer "not there" without asking (AtLeastOnce)
	has   DownstreamHas // ask; nil and !rerun means "cannot know" (AtMostOnce)
}

var (
	atLeastOnce = mode{name: "at-least-once", rerun: true}
	atMostOnce  = mode{name: "at-most-once"}
)

type verdict int

const (
	verdictRerun   verdict = iota // the effect did not happen: run fn again
	verdictDone                   // the effect happened: mark done
	verdictUnknown                // cannot tell: leave the key unknown
)

func (m mode) check(ctx context.Context, key Key) (verdict, error) {
	switch {
	case m.rerun:
		return verdictRerun, nil
	case m.has == nil:
		return verdictUnknown, nil
	}
	ok, err := m.has(ctx, key)
	switch {
	case err != nil:
		return verdictUnknown, err
	case ok:
		return verdictDone, nil
	}
	return verdictRerun, nil
}

// durableClaim reports whether the claim must be durable before fn runs:
// whenever recovery must know that an attempt may have started.
func (m mode) durableClaim() bool { return !m.rerun }

// takeUnknown reports whether the mode can settle an unknown key itself.
func (m mode) takeUnknown() bool { return m.has != nil }
