package idem

import "github.com/idemgo/idem/idemstore"

// Key names one unit of work: a job and the business period the run is for.
//
//	type Key struct {
//		Job    string // a stable job name, e.g. "daily_settle"
//		Period string // the business period, e.g. "2026-10-27"
//	}
//
//	func (k Key) Validate() error                         // ErrInvalidKey (a *KeyError) for an empty, too long or non-text part
//	func (k Key) String() string                          // "job/period"
//	func (k Key) RequestID() string                       // the period's id for a downstream's idempotency key, the same on every attempt and host
//	func (k Key) RevisionRequestID(revision int64) string // the same for a re-run's revision (Rerun); RequestID for revision 0
//	func (k Key) ItemRequestID(item string) string        // the same for an item of a fan-out
//
// Period is the period the work is FOR ("2026-10-27" for the settlement of
// 27 October), never the wall-clock time the run started: a re-run tomorrow of
// yesterday's settlement must produce the same Key. Schedules such as [Daily]
// compute it.
//
// The type is declared in package idemstore ([idemstore.Key]), where the
// stores see it; the fields and methods above are its own (a test keeps
// this list equal to the declaration).
type Key = idemstore.Key

// KeyError describes an invalid [Key] (or an invalid job given to
// [CatchUp]). It matches [ErrInvalidKey]. Its message quotes each part of
// the key escaped and, past 64 bytes, cut short and followed by its length
// ("xxxx"… (10240 bytes)); Key holds them whole.
type KeyError = idemstore.KeyError
