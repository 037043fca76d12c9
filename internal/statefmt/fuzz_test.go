package statefmt

import (
	"encoding/json"
	"errors"
	"testing"
)

// FuzzDecodeState: the decoder never panics; it either reports a corrupt
// file (a *FormatError, which idem.StateFile turns into an
// idem.CorruptStateError), or accepts a document that survives a round trip.
// Its seed corpus is in testdata/fuzz/FuzzDecodeState.
func FuzzDecodeState(f *testing.F) {
	f.Add([]byte(`{"version": 1, "jobs": {}}`))
	f.Add([]byte(`{"version": 1, "jobs": {"daily_report": {"lastDonePeriod": "2026-10-27", "status": "done", "pendingPeriod": "", "attempt": 3, "failures": 0}}}`))
	f.Add([]byte(`{"version": 1, "jobs": {"pay": {"lastDonePeriod": "2026-10-26", "status": "unknown", "pendingPeriod": "2026-10-27", "attempt": 2, "failures": 1, "lastError": "timeout"}}}`))
	f.Add([]byte(`{"version": 2, "jobs": {}}`))
	f.Add([]byte(`{"version": 1, "jobs": {"j": {"status": "running"`))
	f.Add([]byte(``))
	f.Fuzz(func(t *testing.T, b []byte) {
		doc, err := Decode(b)
		if err != nil {
			var fe *FormatError
			if !errors.As(err, &fe) {
				t.Fatalf("error %v (%T) is not a *FormatError", err, err)
			}
			return
		}
		out, err := json.Marshal(doc)
		if err != nil {
			t.Fatalf("accepted document does not encode: %v", err)
		}
		if _, err := Decode(out); err != nil {
			t.Fatalf("accepted document does not decode again: %v\n%s", err, out)
		}
	})
}
