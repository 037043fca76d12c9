package idemstore

import (
	"context"
	"time"
)

// Summarizer is a store that can summarize its records by job without
// listing them: how many it holds in each status, its latest period, its
// latest done period and its latest change. An operators' overview asks it
// instead of listing every record (module ui does). It is optional: a tool
// can compute the same from [Lister.List] (with [SummarizeRecords]), at
// the cost of reading every record.
//
// The SQLite ledger keeps the counts as it writes (a table that triggers
// keep): its Summarize costs a row per job and status and a few seeks per
// job. The Postgres ledger counts on the server (a GROUP BY of its
// records). What is NOT promised: that the summaries of different jobs,
// or a job's counts and its latest periods, are one snapshot while records
// are written.
type Summarizer interface {
	// Summarize returns a summary per job that has at least one record,
	// ordered by job; with job set, of that job alone (none when it has no
	// record).
	Summarize(ctx context.Context, job string) ([]JobSummary, error)
}

// JobSummary is what a [Summarizer] tells of one job.
type JobSummary struct {
	Job        string
	Counts     map[Status]int64 // records by status; a status with none may be missing
	Latest     string           // the latest period that has a record
	LastDone   string           // the latest done period ("" when none)
	LastDoneAt time.Time        // when LastDone's record last changed (its done mark)
	LastChange time.Time        // when a record of the job last changed
}

// Total is the number of the job's records.
func (s JobSummary) Total() int64 {
	var n int64
	for _, c := range s.Counts {
		n += c
	}
	return n
}

// Pager is a store that lists one job's records a page at a time, the
// latest period first, reading only the page: an operators' page of a job
// with many periods asks it for the rows it shows. It is optional: the same
// page can be cut from [Lister.List] (with [PageRecords]), at the cost of
// reading every record of the job. The SQLite and Postgres ledgers
// implement it.
type Pager interface {
	// ListPage returns the records of q.Job that match q, by period,
	// latest first, at most q.Limit of them. A page's records may carry
	// no Value (nil): a page lists, [Store.Lookup] reads one record.
	ListPage(ctx context.Context, q PageQuery) ([]Record, error)
}

// PageQuery selects a page of one job's records for [Pager.ListPage].
type PageQuery struct {
	Job      string   // the job; required
	Statuses []Status // only records with one of these; none means every status
	Before   string   // only periods before this one (in the order of periods, as strings); "" for no bound
	From     string   // only periods at or after this one; "" for no bound
	Limit    int      // at most this many records; required, more than 0
}

// Match reports whether rec belongs to q's page (Limit aside).
func (q PageQuery) Match(rec Record) bool {
	if rec.Key.Job != q.Job || (q.Before != "" && rec.Key.Period >= q.Before) || rec.Key.Period < q.From {
		return false
	}
	if len(q.Statuses) == 0 {
		return true
	}
	for _, s := range q.Statuses {
		if rec.Status == s {
			return true
		}
	}
	return false
}

// PageRecords cuts q's page from recs, records ordered by job, then period
// (as [Lister.List] returns them): what a [Pager] would return.
func PageRecords(recs []Record, q PageQuery) []Record {
	var out []Record
	for i := len(recs) - 1; i >= 0 && len(out) < q.Limit; i-- {
		if q.Match(recs[i]) {
			out = append(out, recs[i])
		}
	}
	return out
}

// SummarizeRecords summarizes recs, ordered by job, then period (as
// [Lister.List] returns them): what a [Summarizer] would return for every
// job.
func SummarizeRecords(recs []Record) []JobSummary {
	var out []JobSummary
	for _, rec := range recs {
		if len(out) == 0 || out[len(out)-1].Job != rec.Key.Job {
			out = append(out, JobSummary{Job: rec.Key.Job, Counts: map[Status]int64{}})
		}
		s := &out[len(out)-1]
		s.Counts[rec.Status]++
		s.Latest = max(s.Latest, rec.Key.Period)
		if rec.Status == StatusDone && rec.Key.Period >= s.LastDone {
			s.LastDone, s.LastDoneAt = rec.Key.Period, rec.Updated
		}
		if rec.Updated.After(s.LastChange) {
			s.LastChange = rec.Updated
		}
	}
	return out
}
