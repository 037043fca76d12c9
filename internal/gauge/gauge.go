// Package gauge is what the metrics adapters (modules prom and otel) read
// at each collection, the same way: the unsettled records per job and
// status, and the outbox per topic, with the jobs and topics seen before
// reported at 0 once they have nothing left.
package gauge

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/idemgo/idem/idemstore"
)

// The statuses of the keys gauge (prom's idem_keys, otel's idem.keys):
// pending counts the records that are running or failed (backing off),
// work that idem retries by itself.
const (
	KeysPending = "pending"
	KeysUnknown = "unknown"
	KeysParked  = "parked"
)

// KeyStatuses are the keys gauge's statuses, in the order reported.
var KeyStatuses = []string{KeysPending, KeysUnknown, KeysParked}

// The statuses of the outbox messages gauge.
const (
	OutboxPending   = "pending"
	OutboxFailing   = "failing"
	OutboxDelivered = "delivered"
	OutboxParked    = "parked"
)

// statusGroups maps the record statuses counted to the keys gauge's.
var statusGroups = []struct {
	status idemstore.Status
	label  string
}{
	{idemstore.StatusRunning, KeysPending},
	{idemstore.StatusFailed, KeysPending},
	{idemstore.StatusUnknown, KeysUnknown},
	{idemstore.StatusParked, KeysParked},
}

// Keys counts l's unsettled records per job and keys status. It lists
// only those, one status at a time, so that a ledger with a long history
// of done periods costs no more than one without. An error is the first
// list's that failed; the counts are then incomplete.
func Keys(ctx context.Context, l idemstore.Lister) (map[string]map[string]int64, error) {
	counts := map[string]map[string]int64{}
	for _, g := range statusGroups {
		recs, err := l.List(ctx, idemstore.Filter{Status: g.status})
		if err != nil {
			return counts, err
		}
		for _, r := range recs {
			if counts[r.Key.Job] == nil {
				counts[r.Key.Job] = map[string]int64{}
			}
			counts[r.Key.Job][g.label]++
		}
	}
	return counts, nil
}

// Seen is the names (jobs, topics) a gauge has reported, so that one
// with nothing left is reported at 0 rather than dropped. Safe for
// concurrent use; the zero Seen is ready.
type Seen struct {
	mu sync.Mutex
	m  map[string]bool
}

// Add remembers names.
func (s *Seen) Add(names ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[string]bool{}
	}
	for _, n := range names {
		s.m[n] = true
	}
}

// All is every name seen, sorted.
func (s *Seen) All() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, 0, len(s.m))
	for n := range s.m {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// Jobs remembers the jobs of counts and returns every job seen.
func (s *Seen) Jobs(counts map[string]map[string]int64) []string {
	for job := range counts {
		s.Add(job)
	}
	return s.All()
}

// Topic is one topic's outbox gauges.
type Topic struct {
	Topic    string
	Messages [4]struct {
		Status string
		N      int64
	}
	OldestAge float64 // seconds the oldest pending message has waited; 0 when none is pending
}

// Topics is a Topic per topic of stats and per topic seen before (at 0),
// with ages at now; it remembers the topics of stats in seen.
func Topics(stats []idemstore.OutboxTopicStats, seen *Seen, now time.Time) []Topic {
	byTopic := map[string]idemstore.OutboxTopicStats{}
	for _, st := range stats {
		byTopic[st.Topic] = st
		seen.Add(st.Topic)
	}
	var out []Topic
	for _, t := range seen.All() {
		st := byTopic[t]
		tp := Topic{Topic: t}
		for i, v := range []struct {
			status string
			n      int64
		}{{OutboxPending, st.Backlog}, {OutboxFailing, st.Failed}, {OutboxDelivered, st.Delivered}, {OutboxParked, st.Parked}} {
			tp.Messages[i].Status, tp.Messages[i].N = v.status, v.n
		}
		if st.Backlog > 0 && !st.Oldest.IsZero() {
			tp.OldestAge = max(0, now.Sub(st.Oldest).Seconds())
		}
		out = append(out, tp)
	}
	return out
}
