package idemstore

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"unicode"
	"unicode/utf8"
)

// MaxKeyPart is the longest Job or Period a Key may have, in bytes.
const MaxKeyPart = 200

// Key names one unit of work: a job and the business period the run is for.
//
// Period is the period the work is FOR ("2026-10-27" for the settlement of
// 27 October), never the wall-clock time the run started: a re-run tomorrow of
// yesterday's settlement must produce the same Key. Schedules such as
// idem.Daily compute it.
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
	if err := ValidatePart("job", k.Job); err != nil {
		return &KeyError{Key: k, Reason: err.Error()}
	}
	if err := ValidatePart("period", k.Period); err != nil {
		return &KeyError{Key: k, Reason: err.Error()}
	}
	return nil
}

// ValidateJob reports whether job can be the Job of a [Key] (the rules of
// [Key.Validate]), for calls that take a job alone, such as idem.CatchUp.
// The error matches [ErrInvalidKey] and names the job only.
func ValidateJob(job string) error {
	if err := ValidatePart("job", job); err != nil {
		return &KeyError{Key: Key{Job: job}, Reason: err.Error(), jobOnly: true}
	}
	return nil
}

// ValidatePart reports whether s can be a part of a [Key] (a job or a
// period) or an item id of idem.Each: non-empty valid UTF-8 of at most
// [MaxKeyPart] bytes with no control characters. The error says what is
// wrong, naming the part as what ("job", "period", "item"); it does not
// quote s (see [QuotePart]).
func ValidatePart(what, s string) error {
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
// a downstream check (idem.DownstreamHas) can ask for it. It is the request id
// of a period (Info.RequestID of idem.Run, $IDEM_REQUEST_ID of the idem
// command); an item of idem.Each has its own, [Key.ItemRequestID].
//
// Format 1, unchanged since the first version of idem and kept so that the
// ids of retries in flight stay the same across an upgrade: "idem-" followed
// by the lowercase hex of the first 16 bytes of SHA-256(Job 0x00 Period),
// 37 characters in all.
func (k Key) RequestID() string {
	var in [128]byte // on the stack for the usual key; a longer one is copied to the heap
	b := append(append(append(in[:0], k.Job...), 0), k.Period...)
	sum := sha256.Sum256(b)
	var id [5 + 32]byte
	copy(id[:], "idem-")
	hex.Encode(id[5:], sum[:16])
	return string(id[:])
}

// revisionIDTag opens the hashed input of a re-run's request id.
const revisionIDTag = "idem revision request id v1"

// RevisionRequestID returns the request id of revision of k's period
// (Info.RequestID of the attempts of a re-run, idem.Rerun): for revision 0,
// the first run, [Key.RequestID]; for a re-run, "idem-" followed by the
// lowercase hex of the first 16 bytes of SHA-256("idem revision request id
// v1" 0x00 Job 0x00 Period 0x00 revision in decimal), the shape of a
// period's id. The same for every attempt of the revision, different from
// every other revision's, so a downstream that dedupes by it sees a re-run
// as new work and a retried attempt of the re-run as the same.
func (k Key) RevisionRequestID(revision int64) string {
	if revision == 0 {
		return k.RequestID()
	}
	h := sha256.New()
	h.Write([]byte(revisionIDTag))
	h.Write([]byte{0})
	h.Write([]byte(k.Job))
	h.Write([]byte{0})
	h.Write([]byte(k.Period))
	h.Write([]byte{0})
	h.Write([]byte(strconv.FormatInt(revision, 10)))
	return "idem-" + hex.EncodeToString(h.Sum(nil)[:16])
}

// itemIDTag opens the hashed input of an item's request id: it names the
// format, so that no other id of idem hashes the same bytes.
const itemIDTag = "idem item request id v2"

// ItemRequestID returns the request id of item of k's period in idem.Each
// (Info.RequestID in the item's fn and in a DownstreamHas check of the
// item): like [Key.RequestID], the same for every attempt, process and
// host, to hand to the downstream as its idempotency key.
//
// Item format 2: "idem-" followed by the lowercase hex of the first 16 bytes
// of SHA-256("idem item request id v2" 0x00 Job 0x00 Period 0x00 item),
// 37 characters in all, the shape of a period's id. The tag and the NUL
// separators (no job, period or item may contain a NUL: [ValidatePart])
// keep it apart from every period's id and every other item's: item "x" of
// period "P" and the period "P/x" have different ids. Format 1 item ids,
// before this version, were those of the period Period+"/"+item; an item
// started under format 1 and retried under format 2 reaches the downstream
// with a new id, so let fan-outs finish before upgrading. For a job, period
// or item that is not valid ([Key.Validate], [ValidatePart]) the id is
// still a function of its input but is not promised to be distinct.
func (k Key) ItemRequestID(item string) string {
	h := sha256.New()
	h.Write([]byte(itemIDTag))
	h.Write([]byte{0})
	h.Write([]byte(k.Job))
	h.Write([]byte{0})
	h.Write([]byte(k.Period))
	h.Write([]byte{0})
	h.Write([]byte(item))
	return "idem-" + hex.EncodeToString(h.Sum(nil)[:16])
}

// KeyError describes an invalid [Key] (or, from [ValidateJob], an invalid
// job). It matches [ErrInvalidKey]. Its message quotes each part of the key
// escaped and, past 64 bytes, cut short and followed by its length
// ("xxxx"… (10240 bytes)); Key holds them whole.
type KeyError struct {
	Key    Key
	Reason string

	jobOnly bool // from ValidateJob: there is no period to show
}

func (e *KeyError) Error() string {
	if e.jobOnly {
		return fmt.Sprintf("idem: invalid job %s: %s", QuotePart(e.Key.Job), e.Reason)
	}
	return fmt.Sprintf("idem: invalid key %s/%s: %s", QuotePart(e.Key.Job), QuotePart(e.Key.Period), e.Reason)
}

// quoteMax is how many bytes of a key part QuotePart shows.
const quoteMax = 64

// QuotePart returns s Go-quoted for a message, shortened to
// its first 64 bytes (cut at a character boundary) followed by "…" and
// its length when it is longer: an invalid key of 10 KB must not make
// every log line 10 KB long. Control characters and invalid UTF-8 are
// escaped, so the result is always one printable line.
func QuotePart(s string) string {
	if len(s) <= quoteMax {
		return strconv.Quote(s)
	}
	cut := quoteMax
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	if cut == 0 { // no character boundary in the first bytes: cut them as bytes
		cut = quoteMax
	}
	return strconv.Quote(s[:cut]) + "… (" + strconv.Itoa(len(s)) + " bytes)"
}

// Is reports whether target is ErrInvalidKey.
func (e *KeyError) Is(target error) bool { return target == ErrInvalidKey }
