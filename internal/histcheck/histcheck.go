// Package histcheck checks a period's history of attempts against its
// record, for the model test (idemtest) and the kill -9 torture test.
package histcheck

import (
	"fmt"

	"github.com/idemgo/idem/idemstore"
)

// Check returns what is wrong with h, the History of rec's key (found:
// the key has a record). Every attempt number from 1 to the record's last
// ended attempt must be there exactly once, in order: a claim takes the
// record's attempt plus one, a takeover ends the attempt it takes over as
// abandoned, and a re-run changes the revision, not the attempt. The
// attempt running now is not there, and revisions neither go back nor pass
// the record's. (A store's history that a process of a release before the
// history shared has gaps; neither test runs one.)
func Check(rec idemstore.Record, found bool, h idemstore.History) []string {
	last := int64(0) // the last attempt that ended
	if found {
		last = rec.Attempt
		if rec.Status == idemstore.StatusRunning {
			last--
		}
	}
	var d []string
	if int64(len(h.Attempts)) != last {
		d = append(d, fmt.Sprintf("%d attempts, want %d (record %s attempt %d)", len(h.Attempts), last, rec.Status, rec.Attempt))
	}
	var rev int64
	for i, a := range h.Attempts {
		switch {
		case a.Attempt != int64(i+1):
			d = append(d, fmt.Sprintf("attempt %d at position %d, want %d", a.Attempt, i+1, i+1))
		case a.Revision < rev || a.Revision > rec.Revision:
			d = append(d, fmt.Sprintf("attempt %d of revision %d after revision %d (record at %d)", a.Attempt, a.Revision, rev, rec.Revision))
		}
		rev = max(rev, a.Revision)
	}
	return d
}
