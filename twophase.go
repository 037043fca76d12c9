package idem

import "context"

// DownstreamHas asks the downstream whether the work of key has already
// reached it: "does the mail gateway have a message with id
// key.RequestID()?". It must answer from the downstream's own records, not
// from a guess. An error means "cannot tell now". In [Each] key is the
// period's and the item is in ctx: ask for InfoFrom(ctx).RequestID, which is
// key.ItemRequestID(item).
type DownstreamHas func(ctx context.Context, key Key) (bool, error)

// TwoPhase marks the key pending (durably) before fn runs and done after it
// returns; when Run finds a pending attempt that died, or fn returned an
// error (a timeout may still have reached the downstream), it asks has
// instead of guessing:
//
//	has answers    what happens
//	true           the key is marked done without running fn (outcome Recovered)
//	false          fn runs again (after backoff, if fn had failed)
//	an error       Run returns it; the key stays unknown and the next Run asks again
//
//	failure                           what happens
//	crash before the claim            next Run runs fn
//	crash after claim, before done    next Run asks has; runs fn only if it says false
//	crash after done                  next Run: AlreadyDone
//	fn returns an error               has is asked; true → Recovered, false → retried with backoff
//	duplicate / concurrent trigger    one runs; others get AlreadyDone or ErrInProgress
//	lease lost while fn runs          fn's context is cancelled; its done is refused (ErrLeaseLost); the next holder asks has
//	power loss                        the pending mark is durable before fn starts
//
// It promises one effect only as far as has tells the truth: a downstream that
// accepts a request and records it later, or loses its records, defeats it.
// And only as far as no holder outlives its lease: a process that stalls
// past its lease (a long GC pause, a frozen VM) can still act after the next
// holder asked has and ran fn. Call [CheckLease] right before the effect,
// choose a lease far longer than any pause, and where the downstream can,
// have it reject stale fencing tokens (Info.Attempt).
// [AtLeastOnce] and [AtMostOnce] are this policy with a fixed answer: "not
// there, run again" and "cannot know, ask a person".
//
// A nil has is an error matching [ErrInvalidOption], returned by the call
// before anything is written.
func TwoPhase(has DownstreamHas) Option {
	return newOption("TwoPhase", classMode, func(c *config) error {
		if has == nil {
			return invalidOption("TwoPhase(nil): no DownstreamHas to ask")
		}
		c.mode = mode{name: "two-phase", has: has}
		return nil
	})
}
