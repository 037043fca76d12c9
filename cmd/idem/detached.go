package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemstore"
)

// storeTimeout bounds one ledger operation that must complete although the
// run is stopping (see detached).
const storeTimeout = time.Minute

// detached wraps the store of a run so that recording an attempt's end
// survives a SIGTERM: when idem is asked to stop, it cancels the run's
// context (so that no backoff wait holds it up), but the failure of the
// interrupted command must still be written to the ledger. Every method
// that records or gives back therefore runs detached from the run's
// cancellation (bounded by storeTimeout); Claim keeps it, so that no new
// period is started once idem is stopping, and so do the other calls that
// take new work (ClaimItems, MarkFresh, RecordTurn, ClaimOutbox, TakeRate,
// AcquireSlot). It also tells the $IDEM_CLOCK=skip clock (skip; nil
// otherwise) when an attempt holds its period.
//
// detached itself is a CatchUpStore and nothing more: detachStore wraps a
// store in the type that has every idemstore interface the store has
// (detachedCapabilities), no more and no fewer.
type detached struct {
	idemstore.CatchUpStore
	skip *skipClock
}

func detach(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), storeTimeout)
}

func (d detached) Claim(ctx context.Context, req idemstore.ClaimRequest) (idemstore.Claim, error) {
	if err := ctx.Err(); err != nil {
		return idemstore.Claim{}, fmt.Errorf("not starting %s: %w", req.Key, context.Cause(ctx))
	}
	ctx, cancel := detach(ctx)
	defer cancel()
	c, err := d.CatchUpStore.Claim(ctx, req)
	if err == nil && c.State == idemstore.ClaimAcquired {
		d.skip.attemptStarted()
	}
	return c, err
}

func (d detached) Renew(ctx context.Context, key idem.Key, attempt int64, now time.Time, lease time.Duration) error {
	ctx, cancel := detach(ctx)
	defer cancel()
	return d.CatchUpStore.Renew(ctx, key, attempt, now, lease)
}

func (d detached) Finish(ctx context.Context, key idem.Key, attempt int64, end idemstore.End) error {
	d.skip.attemptEnded() // the heartbeat has stopped
	ctx, cancel := detach(ctx)
	defer cancel()
	return d.CatchUpStore.Finish(ctx, key, attempt, end)
}

func (d detached) Resolve(ctx context.Context, key idem.Key, to idem.Resolution) error {
	ctx, cancel := detach(ctx)
	defer cancel()
	return d.CatchUpStore.Resolve(ctx, key, to)
}

func (d detached) Lookup(ctx context.Context, key idem.Key) (idem.Record, bool, error) {
	ctx, cancel := detach(ctx)
	defer cancel()
	return d.CatchUpStore.Lookup(ctx, key)
}

func (d detached) Job(ctx context.Context, job string) (idem.JobState, error) {
	ctx, cancel := detach(ctx)
	defer cancel()
	return d.CatchUpStore.Job(ctx, job)
}

func (d detached) Advance(ctx context.Context, job, period string) error {
	ctx, cancel := detach(ctx)
	defer cancel()
	return d.CatchUpStore.Advance(ctx, job, period)
}

func (d detached) Start(ctx context.Context, job, before string) (idem.JobState, error) {
	ctx, cancel := detach(ctx)
	defer cancel()
	return d.CatchUpStore.Start(ctx, job, before)
}

// A capability is an idemstore interface beyond CatchUpStore that a store
// may have; the engine and the packages above it find each by a type
// assertion. detachedCapabilities lists every one without a type
// parameter (the Tx interfaces serve RunTx, CatchUpTx, EachTx and
// outbox.Put, which take a transaction the idem command never has), except
// idemstore.Historian, which idem show reads from the store itself and no
// run needs.
type capability struct {
	name string
	has  func(s any) bool
}

func implements[T any](s any) bool { _, ok := s.(T); return ok }

var detachedCapabilities = []capability{
	{"ItemStore", implements[idemstore.ItemStore]},
	{"ItemRecorder", implements[idemstore.ItemRecorder]},
	{"ItemRecordTurns", implements[idemstore.ItemRecordTurns]},
	{"FreshMarker", implements[idemstore.FreshMarker]},
	{"ClaimFirst", implements[idemstore.ClaimFirst]},
	{"OutboxStore", implements[idemstore.OutboxStore]},
	{"OutboxReleaser", implements[idemstore.OutboxReleaser]},
	{"LimitStore", implements[idemstore.LimitStore]},
	{"Lister", implements[idemstore.Lister]},
	{"Releaser", implements[idemstore.Releaser]},
	{"Rerunner", implements[idemstore.Rerunner]},
}

// capabilities names the capabilities s has, in detachedCapabilities'
// order, separated by spaces ("" for none).
func capabilities(s any) string {
	var names []string
	for _, c := range detachedCapabilities {
		if c.has(s) {
			names = append(names, c.name)
		}
	}
	return strings.Join(names, " ")
}

// detachedKinds makes, by the capabilities of the store d wraps, the
// wrapper that has those and no others: one per store the idem command
// opens (TestDetachedKeepsCapabilities checks each of them).
var detachedKinds = map[string]func(d detached) idemstore.CatchUpStore{
	"": func(d detached) idemstore.CatchUpStore { return d },
	// The SQLite ledger.
	"ItemStore OutboxStore OutboxReleaser LimitStore Lister Rerunner": func(d detached) idemstore.CatchUpStore {
		s := d.CatchUpStore
		return struct {
			detached
			detachedItems
			detachedOutbox
			detachedOutboxReleaser
			detachedLimits
			detachedLister
			detachedRerunner
		}{d, detachedItems{s.(idemstore.ItemStore)}, detachedOutbox{s.(idemstore.OutboxStore)},
			detachedOutboxReleaser{s.(idemstore.OutboxReleaser)}, detachedLimits{s.(idemstore.LimitStore)}, detachedLister{s.(idemstore.Lister)},
			detachedRerunner{s.(idemstore.Rerunner)}}
	},
	// The MySQL ledger.
	"ItemStore ItemRecorder ItemRecordTurns FreshMarker OutboxStore OutboxReleaser LimitStore Lister Rerunner": func(d detached) idemstore.CatchUpStore {
		s := d.CatchUpStore
		return struct {
			detached
			detachedItems
			detachedItemRecorder
			detachedItemRecordTurns
			detachedFreshMarker
			detachedOutbox
			detachedOutboxReleaser
			detachedLimits
			detachedLister
			detachedRerunner
		}{d, detachedItems{s.(idemstore.ItemStore)}, detachedItemRecorder{s.(idemstore.ItemRecorder)},
			detachedItemRecordTurns{s.(idemstore.ItemRecordTurns)}, detachedFreshMarker{s.(idemstore.FreshMarker)},
			detachedOutbox{s.(idemstore.OutboxStore)},
			detachedOutboxReleaser{s.(idemstore.OutboxReleaser)}, detachedLimits{s.(idemstore.LimitStore)}, detachedLister{s.(idemstore.Lister)},
			detachedRerunner{s.(idemstore.Rerunner)}}
	},
	// The Postgres ledger.
	"ItemStore ItemRecorder ItemRecordTurns FreshMarker ClaimFirst OutboxStore OutboxReleaser LimitStore Lister Rerunner": func(d detached) idemstore.CatchUpStore {
		s := d.CatchUpStore
		return struct {
			detached
			detachedItems
			detachedItemRecorder
			detachedItemRecordTurns
			detachedFreshMarker
			detachedClaimFirst
			detachedOutbox
			detachedOutboxReleaser
			detachedLimits
			detachedLister
			detachedRerunner
		}{d, detachedItems{s.(idemstore.ItemStore)}, detachedItemRecorder{s.(idemstore.ItemRecorder)},
			detachedItemRecordTurns{s.(idemstore.ItemRecordTurns)}, detachedFreshMarker{s.(idemstore.FreshMarker)},
			detachedClaimFirst{s.(idemstore.ClaimFirst)}, detachedOutbox{s.(idemstore.OutboxStore)},
			detachedOutboxReleaser{s.(idemstore.OutboxReleaser)}, detachedLimits{s.(idemstore.LimitStore)}, detachedLister{s.(idemstore.Lister)},
			detachedRerunner{s.(idemstore.Rerunner)}}
	},
	// The Redis store.
	"LimitStore Lister Rerunner": func(d detached) idemstore.CatchUpStore {
		s := d.CatchUpStore
		return struct {
			detached
			detachedLimits
			detachedLister
			detachedRerunner
		}{d, detachedLimits{s.(idemstore.LimitStore)}, detachedLister{s.(idemstore.Lister)}, detachedRerunner{s.(idemstore.Rerunner)}}
	},
}

// detachStore wraps s, the store of a run, in detached, keeping every
// capability s has. A store whose capabilities no wrapper has is an error:
// a wrapper that dropped one would change what the engine does with it.
func detachStore(s idemstore.CatchUpStore, skip *skipClock) (idemstore.CatchUpStore, error) {
	caps := capabilities(s)
	kind, ok := detachedKinds[caps]
	if !ok {
		return nil, fmt.Errorf("the store %T has the capabilities %q, for which the idem command has no detached wrapper (add one to detachedKinds)", s, caps)
	}
	return kind(detached{s, skip}), nil
}

// The forwarders of the capabilities: each runs detached what records or
// gives back, and passes the caller's context to what takes new work.

type detachedRerunner struct{ s idemstore.Rerunner }

func (d detachedRerunner) Rerun(ctx context.Context, req idemstore.RerunRequest) ([]idemstore.RerunOutcome, error) {
	ctx, cancel := detach(ctx)
	defer cancel()
	return d.s.Rerun(ctx, req)
}

func (d detachedRerunner) RerunsDue(ctx context.Context, job, through string) ([]string, error) {
	return d.s.RerunsDue(ctx, job, through)
}

type detachedItems struct{ s idemstore.ItemStore }

func (d detachedItems) AddItems(ctx context.Context, key idem.Key, items []string) error {
	ctx, cancel := detach(ctx)
	defer cancel()
	return d.s.AddItems(ctx, key, items)
}

func (d detachedItems) SealItems(ctx context.Context, key idem.Key) error {
	ctx, cancel := detach(ctx)
	defer cancel()
	return d.s.SealItems(ctx, key)
}

func (d detachedItems) CountItems(ctx context.Context, key idem.Key) (idemstore.ItemCounts, error) {
	ctx, cancel := detach(ctx)
	defer cancel()
	return d.s.CountItems(ctx, key)
}

func (d detachedItems) ClaimItems(ctx context.Context, key idem.Key, req idemstore.ItemClaimRequest) (idemstore.ItemBatch, error) {
	return d.s.ClaimItems(ctx, key, req)
}

func (d detachedItems) FinishItems(ctx context.Context, key idem.Key, step idemstore.ItemStep, ends []idemstore.ItemEnd) ([]string, error) {
	ctx, cancel := detach(ctx)
	defer cancel()
	return d.s.FinishItems(ctx, key, step, ends)
}

type detachedItemRecorder struct{ s idemstore.ItemRecorder }

func (d detachedItemRecorder) RecordItems(ctx context.Context, key idem.Key, chunks [][]string) error {
	ctx, cancel := detach(ctx)
	defer cancel()
	return d.s.RecordItems(ctx, key, chunks)
}

type detachedItemRecordTurns struct{ s idemstore.ItemRecordTurns }

func (d detachedItemRecordTurns) RecordTurn(ctx context.Context, key idem.Key, wait time.Duration) (idemstore.ItemTurn, error) {
	return d.s.RecordTurn(ctx, key, wait)
}

// detachedFreshMarker's MarkFresh takes a period as Claim does: not once
// idem is stopping.
type detachedFreshMarker struct{ s idemstore.FreshMarker }

func (d detachedFreshMarker) MarkFresh(ctx context.Context, req idemstore.ClaimRequest) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, fmt.Errorf("not starting %s: %w", req.Key, context.Cause(ctx))
	}
	return d.s.MarkFresh(ctx, req)
}

type detachedClaimFirst struct{ s idemstore.ClaimFirst }

func (d detachedClaimFirst) ClaimCommittedFirst() { d.s.ClaimCommittedFirst() }

type detachedOutbox struct{ s idemstore.OutboxStore }

func (d detachedOutbox) ClaimOutbox(ctx context.Context, req idemstore.OutboxClaimRequest) ([]idemstore.OutboxRecord, error) {
	return d.s.ClaimOutbox(ctx, req)
}

func (d detachedOutbox) DeliveredOutbox(ctx context.Context, id string, token int64, now time.Time) error {
	ctx, cancel := detach(ctx)
	defer cancel()
	return d.s.DeliveredOutbox(ctx, id, token, now)
}

func (d detachedOutbox) FailOutbox(ctx context.Context, id string, token int64, f idemstore.OutboxFailure) error {
	ctx, cancel := detach(ctx)
	defer cancel()
	return d.s.FailOutbox(ctx, id, token, f)
}

func (d detachedOutbox) ListOutbox(ctx context.Context, f idemstore.OutboxFilter) ([]idemstore.OutboxRecord, error) {
	ctx, cancel := detach(ctx)
	defer cancel()
	return d.s.ListOutbox(ctx, f)
}

func (d detachedOutbox) RetryOutbox(ctx context.Context, id string, now time.Time) error {
	ctx, cancel := detach(ctx)
	defer cancel()
	return d.s.RetryOutbox(ctx, id, now)
}

func (d detachedOutbox) DropOutbox(ctx context.Context, id string) error {
	ctx, cancel := detach(ctx)
	defer cancel()
	return d.s.DropOutbox(ctx, id)
}

func (d detachedOutbox) PruneOutbox(ctx context.Context, before time.Time) (int64, error) {
	ctx, cancel := detach(ctx)
	defer cancel()
	return d.s.PruneOutbox(ctx, before)
}

func (d detachedOutbox) OutboxStats(ctx context.Context) ([]idemstore.OutboxTopicStats, error) {
	ctx, cancel := detach(ctx)
	defer cancel()
	return d.s.OutboxStats(ctx)
}

type detachedOutboxReleaser struct{ s idemstore.OutboxReleaser }

func (d detachedOutboxReleaser) ReleaseOutbox(ctx context.Context, claims []idemstore.OutboxClaimed) error {
	ctx, cancel := detach(ctx)
	defer cancel()
	return d.s.ReleaseOutbox(ctx, claims)
}

type detachedLimits struct{ s idemstore.LimitStore }

func (d detachedLimits) TakeRate(ctx context.Context, name string, r idemstore.Rate, n int, maxWait time.Duration) (time.Duration, bool, error) {
	return d.s.TakeRate(ctx, name, r, n, maxWait)
}

func (d detachedLimits) AcquireSlot(ctx context.Context, name string, max int, h idemstore.SlotHolder, lease time.Duration) (int, bool, time.Duration, error) {
	return d.s.AcquireSlot(ctx, name, max, h, lease)
}

func (d detachedLimits) RenewSlot(ctx context.Context, name string, slot int, h idemstore.SlotHolder, lease time.Duration) (bool, error) {
	ctx, cancel := detach(ctx)
	defer cancel()
	return d.s.RenewSlot(ctx, name, slot, h, lease)
}

func (d detachedLimits) ReleaseSlot(ctx context.Context, name string, slot int, h idemstore.SlotHolder) error {
	ctx, cancel := detach(ctx)
	defer cancel()
	return d.s.ReleaseSlot(ctx, name, slot, h)
}

type detachedLister struct{ s idemstore.Lister }

func (d detachedLister) List(ctx context.Context, f idemstore.Filter) ([]idem.Record, error) {
	ctx, cancel := detach(ctx)
	defer cancel()
	return d.s.List(ctx, f)
}
