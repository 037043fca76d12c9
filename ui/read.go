package ui

import (
	"context"

	"github.com/idemgo/idem/idemstore"
)

// reader is one request's access to the records: through the store's
// idemstore.Summarizer and idemstore.Pager when it has them (cost by jobs
// and by rows shown), else cut from its List (cost by records kept: the
// state file, Redis, a store of your own), listed once per request.
type reader struct {
	s   Store
	all map[string][]idemstore.Record // job ("" for every job) → List's answer
}

func newReader(s Store) *reader { return &reader{s: s, all: map[string][]idemstore.Record{}} }

// list is List's answer for job ("" for every job), read once per request;
// a job's records are cut from every job's when those were read.
func (r *reader) list(ctx context.Context, job string) ([]idemstore.Record, error) {
	if recs, ok := r.all[job]; ok {
		return recs, nil
	}
	if all, ok := r.all[""]; ok {
		var recs []idemstore.Record
		for _, rec := range all {
			if rec.Key.Job == job {
				recs = append(recs, rec)
			}
		}
		return recs, nil
	}
	recs, err := r.s.List(ctx, idemstore.Filter{Job: job})
	if err != nil {
		return nil, err
	}
	r.all[job] = recs
	return recs, nil
}

// summaries is the summary of every job (job "") or of one.
func (r *reader) summaries(ctx context.Context, job string) ([]idemstore.JobSummary, error) {
	if s, ok := r.s.(idemstore.Summarizer); ok {
		return s.Summarize(ctx, job)
	}
	recs, err := r.list(ctx, job)
	if err != nil {
		return nil, err
	}
	return idemstore.SummarizeRecords(recs), nil
}

// page is one page of a job's records, the latest period first.
func (r *reader) page(ctx context.Context, q idemstore.PageQuery) ([]idemstore.Record, error) {
	if p, ok := r.s.(idemstore.Pager); ok {
		return p.ListPage(ctx, q)
	}
	recs, err := r.list(ctx, q.Job)
	if err != nil {
		return nil, err
	}
	return idemstore.PageRecords(recs, q), nil
}
