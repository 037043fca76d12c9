package main

import (
	"encoding/base64"
	"encoding/json"
	"io"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/idemgo/idem"
)

// recordJSON is a ledger record as `ls --json` and `show --json` print it.
// Times are RFC 3339 in UTC; a time that is not set is left out.
type recordJSON struct {
	Job        string     `json:"job"`
	Period     string     `json:"period"`
	Status     string     `json:"status"`
	Attempt    int64      `json:"attempt"`
	Failures   int        `json:"failures"`
	Owner      string     `json:"owner,omitempty"`
	LeaseUntil *time.Time `json:"lease_until,omitempty"`
	NotBefore  *time.Time `json:"not_before,omitempty"`
	LastError  string     `json:"last_error,omitempty"`
	Updated    *time.Time `json:"updated,omitempty"`
	RequestID  string     `json:"request_id"` // the revision's (re-runs: idem rerun)
	Revision   int64      `json:"revision"`   // 0, or the re-runs requested after it was done

	Fingerprint string `json:"fingerprint,omitempty"`  // of the params (--params) it was first run with
	Value       string `json:"value,omitempty"`        // stored with the done mark (--capture), when it is text
	ValueBase64 string `json:"value_base64,omitempty"` // the same, when it is not UTF-8 text

	WaitsFor string `json:"waits_for,omitempty"` // with --after: the upstream periods it waits for

	History []revisionJSON `json:"history,omitempty"` // show only: its revisions, their requests and ended attempts
}

func utcPtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	u := t.UTC()
	return &u
}

func toJSON(r idem.Record) recordJSON {
	j := recordJSON{
		Job: r.Key.Job, Period: r.Key.Period, Status: string(r.Status), Attempt: r.Attempt, Failures: r.Failures,
		Owner: r.Owner, LeaseUntil: utcPtr(r.LeaseUntil), NotBefore: utcPtr(r.NotBefore), LastError: r.LastError,
		Updated: utcPtr(r.Updated), RequestID: r.Key.RevisionRequestID(r.Revision), Revision: r.Revision, Fingerprint: r.Fingerprint,
	}
	if utf8.Valid(r.Value) {
		j.Value = string(r.Value)
	} else {
		j.ValueBase64 = base64.StdEncoding.EncodeToString(r.Value)
	}
	return j
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

func truncate(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) <= n {
		return s
	}
	return s[:n-3] + "..."
}
