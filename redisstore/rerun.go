package redisstore

import (
	"context"
	"fmt"
	"strconv"

	"github.com/idemgo/idem/idemstore"
)

var _ idemstore.Rerunner = (*Store)(nil)

// The keys of re-run requests (see the package doc).
func (s *Store) rerunBase(job string) string {
	return s.prefix + ":rerun:" + strconv.Itoa(len(job)) + ":" + job + ":"
}
func (s *Store) rerunKey(k idemstore.Key) string   { return s.rerunBase(k.Job) + k.Period }
func (s *Store) rerunPeriodsKey(job string) string { return s.prefix + ":reruns:" + job }

// Rerun implements [idemstore.Rerunner] with one script (rerunScript):
// every key of req gets its new revision or its waiting request, or, if
// one of them cannot be re-run ([idemstore.Rerunnable]), none does. The
// request is as durable when Rerun returns as the server makes its writes
// (see [AllowWeakDurability]). Each period keeps its requests in a hash
// keyed by the request's id: the same request sent again is seen and
// changes nothing. A request that comes while an attempt holds the period
// waits for the attempt's done mark, which gives the period the revision
// in its own script (Finish). Times are the server's: req.Now is ignored.
func (s *Store) Rerun(ctx context.Context, req idemstore.RerunRequest) ([]idemstore.RerunOutcome, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	keys := make([]string, 0, 4*len(req.Keys)+2)
	args := []any{req.RequestID, req.Reason, req.By}
	for _, k := range req.Keys {
		keys = append(keys, s.runKey(k), s.jobKey(k.Job), s.rerunKey(k), s.rerunPeriodsKey(k.Job))
		args = append(args, k.Period)
	}
	keys = append(keys, s.metaKey(), s.wakesKey())
	for _, k := range req.Keys {
		args = append(args, k.Job)
	}
	v, err := rerunScript.Run(ctx, s.client, keys, args...).Slice()
	if err != nil {
		return nil, fmt.Errorf("redisstore: store %q: re-run: %w", s.name, err)
	}
	if len(v) == 6 && str(v[0]) == "refused" {
		i := int(i64(v[1])) - 1
		if i < 0 || i >= len(req.Keys) {
			return nil, fmt.Errorf("redisstore: store %q: re-run: the script refused key %d of %d", s.name, i+1, len(req.Keys))
		}
		rec := idemstore.Record{Key: req.Keys[i], Status: idemstore.Status(str(v[4])), LastError: str(v[5])}
		err := idemstore.Rerunnable(rec, i64(v[2]) == 1, i64(v[3]) == 1)
		if err == nil {
			err = fmt.Errorf("redisstore: store %q: re-run: the script refused %s (%s) without a reason", s.name, rec.Key, rec.Status)
		}
		return nil, fmt.Errorf("%w (nothing was changed)", err)
	}
	if len(v) != 2*len(req.Keys) {
		return nil, fmt.Errorf("redisstore: store %q: re-run: the script returned %d values, want %d", s.name, len(v), 2*len(req.Keys))
	}
	out := make([]idemstore.RerunOutcome, len(req.Keys))
	for i, k := range req.Keys {
		o := idemstore.RerunOutcome{Key: k, Revision: i64(v[2*i+1])}
		switch str(v[2*i]) {
		case "queued":
			o.State = idemstore.RerunQueued
		case "after":
			o.State = idemstore.RerunAfterRun
		case "due":
			o.State = idemstore.RerunDue
		case "seen":
			o.State = idemstore.RerunSeen
		default:
			return nil, fmt.Errorf("redisstore: store %q: re-run %s: the script answered %q", s.name, k, str(v[2*i]))
		}
		out[i] = o
	}
	return out, nil
}

// RerunsDue implements [idemstore.Rerunner], with one script that reads
// the records of the job's periods that were ever re-run (few), not every
// record of the job.
func (s *Store) RerunsDue(ctx context.Context, job, through string) ([]string, error) {
	periods, err := rerunsDueScript.Run(ctx, s.client, []string{s.rerunPeriodsKey(job)}, s.runBase(job), through).StringSlice()
	if err != nil {
		return nil, fmt.Errorf("redisstore: store %q: re-runs due of %q: %w", s.name, job, err)
	}
	if periods == nil {
		periods = []string{}
	}
	return periods, nil
}
