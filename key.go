package idem

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"unicode"
	"unicode/utf8"
)

// MaxKeyPart is the longest Job or Period a Key may have, in bytes.
const MaxKeyPart = 200

// Key names one unit of work: a job and the business period the run is for.
//
// Period is the period the work is FOR ("2026-10-27" for the settlement of
// 27 October), never the wall-clock time the run started: a re-run tomorrow of
// yesterday's settlement must produce the same Key. Schedules such as [Daily]
// compute it.
type Key struct {
	Job    string // a stable job name, e.g. "daily_settle"
	Period string // the business period, e.g. "2026-10-27"
}

// String returns "job/period".
func (k Key) String() string { return k.Job + "/" + k.Period }

// Validate reports whether k can be stored. Job and Period must each be
// non-empty valid UTF-8 of at most [MaxKeyPart] bytes with no control
// characters. The error matches [ErrInvalidKey].
func (k Key) Validate() error {
	if err := validPart("job", k.Job); err != nil {
		return &KeyError{Key: k, Reason: err.Error()}
	}
	if err := validPart("period", k.Period); err != nil {
		return &KeyError{Key: k, Reason: err.Error()}
	}
	return nil
}

func validPart(what, s string) error {
	switch {
	case s == "":
		return fmt.Errorf("%s is empty", what)
	case len(s) > MaxKeyPart:
		return fmt.Errorf("%s is %d bytes, more than %d", what, len(s), MaxKeyPart)
	case !utf8.ValidString(s):
		return fmt.Errorf("%s is not valid UTF-8", what)
	}
	for i, r := range s {
		if unicode.IsControl(r) {
			return fmt.Errorf("%s has a control character %U at byte %d", what, r, i)
		}
	}
	return nil
}

// RequestID returns an identifier derived from the key alone: the same for
// every attempt, every process and every host. Hand it to a downstream
// service as its idempotency key (a payment gateway's Idempotency-Key, a mail
// gateway's message id), so that a retried attempt is recognised there, and so
// a [DownstreamHas] check can ask for it.
func (k Key) RequestID() string {
	h := sha256.New()
	h.Write([]byte(k.Job))
	h.Write([]byte{0})
	h.Write([]byte(k.Period))
	return "idem-" + hex.EncodeToString(h.Sum(nil)[:16])
}

// KeyError describes an invalid [Key]. It matches [ErrInvalidKey].
type KeyError struct {
	Key    Key
	Reason string
}

func (e *KeyError) Error() string {
	return fmt.Sprintf("idem: invalid key %q/%q: %s", e.Key.Job, e.Key.Period, e.Reason)
}

// Is reports whether target is ErrInvalidKey.
func (e *KeyError) Is(target error) bool { return target == ErrInvalidKey }
