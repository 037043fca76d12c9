package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemstore"
	"github.com/idemgo/idem/internal/dupes"
	"github.com/redis/go-redis/v9"
)

// DefaultPrefix is the prefix of the store's keys unless [WithPrefix]
// names another.
const DefaultPrefix = "idem"

// LayoutVersion is the version of the key layout this version of
// redisstore writes (kept in the field version of the key {prefix}:meta).
// A store whose layout has a higher version is refused with
// [idem.ErrNewerSchema], without a write.
const LayoutVersion = 1

// ErrWeakDurability: the Redis server does not make every write durable
// before it replies (appendonly is not yes, or appendfsync is not always),
// its configuration cannot be read, or it is a replica; [New] and [Open]
// refuse it unless [AllowWeakDurability] is given (not for a replica). The
// error's text says what the server has.
var ErrWeakDurability = errors.New("idem: redis server does not make every write durable")

// ErrAuth: the Redis server refused the connection's authentication: it
// requires a password and none was given (NOAUTH), or the user name or
// password is wrong (WRONGPASS). [New] and [Open] return an error that
// matches it and wraps the server's reply; pass the password in the URL
// (redis://:password@host:port, redis://user:password@host:port) or in the
// client's options.
var ErrAuth = errors.New("idem: redis server refused authentication")

// Store is an idem store in Redis. It implements [idemstore.Store],
// [idemstore.CatchUpStore], [idemstore.Lister], [idemstore.Rerunner]
// (idem.Rerun) and, for package limit, [idemstore.LimitStore]. It is not an
// [idemstore.ItemStore]: idem.Each does not take it (a call does not
// compile), and neither is it an [idemstore.TxStore], since Redis holds
// no business data to commit with a done mark. For the same reason it has
// no outbox: outbox.Put has no transaction of it to write to (it returns
// outbox.ErrNoOutbox wherever no outbox is at hand), and idem.Relay does not
// take it.
//
// A Store is safe for concurrent use by many goroutines, processes and
// hosts.
type Store struct {
	client   redis.UniversalClient
	owned    bool
	prefix   string // "{" + the prefix + "}": every key's hash tag
	name     string // the prefix as given
	jobs     string // jobsKey, made once
	defaults []idem.Option

	// dups is how often the store's recent claims found their key done:
	// while most did, a claim reads the record before it runs the script.
	dups dupes.Recent
}

var (
	_ idemstore.Store        = (*Store)(nil)
	_ idemstore.CatchUpStore = (*Store)(nil)
	_ idemstore.Lister       = (*Store)(nil)
)

// An Option configures a Store, for [New] and [Open]. As with idem's own
// options, a nil one or one given a value it cannot take makes New and
// Open return an error matching [idem.ErrInvalidOption] that names it,
// before anything is written.
type Option func(*config)

type config struct {
	prefix  string
	runOpts []idem.Option
	weak    bool
}

// WithPrefix keeps the store's keys under prefix instead of
// [DefaultPrefix]: every key begins with "{prefix}:". Stores with
// different prefixes on one server are independent.
func WithPrefix(prefix string) Option { return func(c *config) { c.prefix = prefix } }

// WithRunOptions makes opts the defaults of every Run on the store (a
// lease, a backoff, a logger...), and of idem's other calls that take the
// store; options passed to a call override them (see [idem.Option]).
// An invalid one makes New and Open return an error matching
// [idem.ErrInvalidOption] before anything is written.
func WithRunOptions(opts ...idem.Option) Option {
	return func(c *config) { c.runOpts = append(c.runOpts, opts...) }
}

// AllowWeakDurability lets [New] and [Open] accept a server that does not
// fsync its append-only file before every reply, or whose configuration
// cannot be read (a managed Redis that disables CONFIG). The store then
// works as usual, but a write the server acknowledged can be lost if the
// server crashes:
//
//   - appendfsync everysec: the writes of about the last second, if the
//     server's host loses power or its kernel crashes (a crash of the
//     redis-server process alone loses nothing it acknowledged);
//   - appendfsync no: what the kernel had not yet written back (tens of
//     seconds), on the same failures;
//   - appendonly no: everything since the last RDB snapshot, on any crash
//     of redis-server, even of the process alone.
//
// A lost done mark makes its key run again (every mode); a lost claim
// (the pending mark of AtMostOnce and TwoPhase) lets the key run again
// without the doubt that would have stopped AtMostOnce or made TwoPhase
// check the downstream: the effect can then happen twice. A replica is
// refused even so: its writes are not replicated and a resync drops them.
func AllowWeakDurability() Option { return func(c *config) { c.weak = true } }

// New attaches a store to the caller's client (a *redis.Client, or a
// *redis.ClusterClient: every key of a store has one hash tag, so it lives
// in one slot). Close does not close client.
//
// It first checks the server's durability (see [ErrWeakDurability] and
// [AllowWeakDurability]) with CONFIG GET appendonly and appendfsync and
// ROLE, on the node the client sends them to (a server that refuses the
// client's authentication is [ErrAuth], with or without the option); then the layout version of
// the store's keys, refusing one written by a newer redisstore
// ([idem.ErrNewerSchema]) without a write.
func New(ctx context.Context, client redis.UniversalClient, opts ...Option) (*Store, error) {
	if client == nil {
		return nil, errors.New("redisstore: New with a nil client")
	}
	c := config{prefix: DefaultPrefix}
	for i, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("%w: redisstore: option %d of %d is nil", idem.ErrInvalidOption, i+1, len(opts))
		}
		o(&c)
	}
	if c.prefix == "" || len(c.prefix) > 200 || strings.ContainsAny(c.prefix, "{}") || strings.ContainsFunc(c.prefix, isControl) {
		return nil, fmt.Errorf("%w: redisstore.WithPrefix(%q): a prefix is 1 to 200 bytes, no braces or control characters", idem.ErrInvalidOption, c.prefix)
	}
	if err := idem.CheckStoreOptions(c.runOpts...); err != nil {
		return nil, fmt.Errorf("redisstore: store %q: %w", c.prefix, err)
	}
	s := &Store{client: client, prefix: "{" + c.prefix + "}", name: c.prefix, defaults: c.runOpts}
	s.jobs = s.prefix + ":jobs"
	if err := s.checkDurability(ctx, c.weak); err != nil {
		return nil, err
	}
	if err := s.checkLayout(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

func isControl(r rune) bool { return r < 0x20 || r == 0x7f }

// Open connects to the server at url (redis://[user:password@]host:port[/db]
// or rediss:// for TLS, as redis.ParseURL accepts) with a client of its
// own, and attaches a store to it as [New] does. Close closes the client.
func Open(ctx context.Context, url string, opts ...Option) (*Store, error) {
	o, err := redis.ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("redisstore: open: %w", err)
	}
	client := redis.NewClient(o)
	s, err := New(ctx, client, opts...)
	if err != nil {
		_ = client.Close()
		return nil, err
	}
	s.owned = true
	return s, nil
}

// checkDurability refuses a replica, and a server that does not fsync
// every write before replying unless weak.
func (s *Store) checkDurability(ctx context.Context, weak bool) error {
	role, err := s.client.Do(ctx, "ROLE").Slice()
	if redis.IsAuthError(err) {
		return s.authErr(err)
	}
	if err == nil && len(role) > 0 && role[0] == "slave" {
		return fmt.Errorf("%w: the server is a replica (ROLE slave): connect to its primary", ErrWeakDurability)
	}
	cfg, err := s.client.ConfigGet(ctx, "append*").Result()
	if err != nil {
		if redis.IsAuthError(err) {
			return s.authErr(err)
		}
		var refused redis.Error
		if !errors.As(err, &refused) { // not the server's answer: it was not reached
			return fmt.Errorf("redisstore: store %q: reading the server's configuration: %w", s.name, err)
		}
		if weak {
			return nil
		}
		return fmt.Errorf("%w: cannot read its configuration (CONFIG GET appendonly, appendfsync: %v); "+
			"if the server fsyncs its append-only file on every write, or you accept losing writes, pass redisstore.AllowWeakDurability()",
			ErrWeakDurability, err)
	}
	if cfg["appendonly"] == "yes" && cfg["appendfsync"] == "always" {
		return nil
	}
	if weak {
		return nil
	}
	return fmt.Errorf("%w: it has appendonly %s, appendfsync %s; a done mark it acknowledged could be lost in a crash. "+
		"Set appendonly yes and appendfsync always, or pass redisstore.AllowWeakDurability() to accept the loss",
		ErrWeakDurability, orNone(cfg["appendonly"]), orNone(cfg["appendfsync"]))
}

// authErr is ErrAuth with the server's reply err.
func (s *Store) authErr(err error) error {
	return fmt.Errorf("%w: store %q: %w (give the password in the URL, redis://[user]:password@host:port, or in the client's options)",
		ErrAuth, s.name, err)
}

func orNone(v string) string {
	if v == "" {
		return "(none)"
	}
	return v
}

// checkLayout refuses a layout newer than LayoutVersion and records this
// version if none is recorded.
func (s *Store) checkLayout(ctx context.Context) error {
	v, err := s.client.HGet(ctx, s.metaKey(), "version").Int64()
	switch {
	case errors.Is(err, redis.Nil):
		if err := s.client.HSetNX(ctx, s.metaKey(), "version", LayoutVersion).Err(); err != nil {
			return fmt.Errorf("redisstore: store %q: recording the layout version: %w", s.name, err)
		}
		return s.checkLayoutOnce(ctx)
	case err != nil:
		return fmt.Errorf("redisstore: store %q: reading the layout version: %w", s.name, err)
	case v > LayoutVersion:
		return fmt.Errorf("%w: redis store %q has layout version %d, this redisstore knows %d (left untouched)",
			idem.ErrNewerSchema, s.name, v, LayoutVersion)
	}
	return nil
}

// checkLayoutOnce reads the version again after HSETNX (a newer one may
// have won the race).
func (s *Store) checkLayoutOnce(ctx context.Context) error {
	v, err := s.client.HGet(ctx, s.metaKey(), "version").Int64()
	if err != nil {
		return fmt.Errorf("redisstore: store %q: reading the layout version: %w", s.name, err)
	}
	if v > LayoutVersion {
		return fmt.Errorf("%w: redis store %q has layout version %d, this redisstore knows %d (left untouched)",
			idem.ErrNewerSchema, s.name, v, LayoutVersion)
	}
	return nil
}

// Client returns the store's client.
func (s *Store) Client() redis.UniversalClient { return s.client }

// Prefix returns the prefix of the store's keys, as given to [WithPrefix].
func (s *Store) Prefix() string { return s.name }

// Close closes the client if [Open] opened it; a client passed to [New]
// stays open.
func (s *Store) Close() error {
	if s.owned {
		return s.client.Close()
	}
	return nil
}

// String describes the store for logs.
func (s *Store) String() string { return "redisstore.Store(prefix " + strconv.Quote(s.name) + ")" }

// DefaultOptions returns the options given with [WithRunOptions]: the
// defaults of every Run and CatchUp on the store, which the idem engine
// applies before the call's own options.
func (s *Store) DefaultOptions() []idem.Option { return s.defaults }

// Run runs fn for key on this store: see [idem.RunOn] for the protocol
// and [idem.AtLeastOnce], [idem.AtMostOnce] and [idem.TwoPhase] for what
// each mode guarantees.
func (s *Store) Run(ctx context.Context, key idemstore.Key, fn func(context.Context) error, opts ...idem.Option) error {
	return idem.RunOn(ctx, s, key, fn, opts...)
}

// Reset un-parks a parked key: it becomes runnable at once with its
// failure count cleared. It is Resolve(ctx, key, idem.ResolveRetry).
func (s *Store) Reset(ctx context.Context, key idemstore.Key) error {
	return s.Resolve(ctx, key, idemstore.ResolveRetry)
}

// The key layout (see the package doc).
func (s *Store) metaKey() string              { return s.prefix + ":meta" }
func (s *Store) wakesKey() string             { return s.prefix + ":wakes" }
func (s *Store) jobsKey() string              { return s.jobs }
func (s *Store) jobKey(job string) string     { return s.prefix + ":job:" + job }
func (s *Store) periodsKey(job string) string { return s.prefix + ":periods:" + job }
func (s *Store) runBase(job string) string {
	return s.prefix + ":run:" + strconv.Itoa(len(job)) + ":" + job + ":"
}
func (s *Store) runKey(k idemstore.Key) string { return s.runBase(k.Job) + k.Period }

// micros is d in whole microseconds, the unit the scripts take.
func micros(d time.Duration) int64 { return int64(d / time.Microsecond) }

// fromMicros is a stored time (microseconds since the epoch, "" or nil for
// none).
func fromMicros(v any) time.Time {
	var n int64
	switch v := v.(type) {
	case int64:
		n = v
	case string:
		if v == "" {
			return time.Time{}
		}
		n, _ = strconv.ParseInt(v, 10, 64)
	default:
		return time.Time{}
	}
	if n == 0 {
		return time.Time{}
	}
	return time.UnixMicro(n)
}

func str(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case int64:
		return strconv.FormatInt(v, 10)
	}
	return ""
}

func i64(v any) int64 {
	switch v := v.(type) {
	case int64:
		return v
	case string:
		n, _ := strconv.ParseInt(v, 10, 64)
		return n
	}
	return 0
}

// record decodes the 11 fields of a record (status first, nil when the key
// has none).
func record(key idemstore.Key, f []any) (rec idemstore.Record, found bool) {
	rec.Key = key
	if len(f) < recFields || f[0] == nil {
		return rec, false
	}
	rec.Status = idemstore.Status(str(f[0]))
	rec.Attempt = i64(f[1])
	rec.Failures = int(i64(f[2]))
	rec.Owner = str(f[3])
	rec.LeaseUntil = fromMicros(f[4])
	rec.NotBefore = fromMicros(f[5])
	rec.LastError = str(f[6])
	rec.Updated = fromMicros(f[7])
	rec.Fingerprint = str(f[8])
	if v := str(f[9]); v != "" {
		rec.Value = []byte(v)
	}
	rec.Revision = i64(f[10])
	return rec, true
}

// recFields is how many fields of a record the scripts return (luaLib's
// recFields).
const recFields = 11

// snapshot is what one read of a key found, on the server's clock.
type snapshot struct {
	now     time.Time
	rec     idemstore.Record
	found   bool
	covered bool // the job's horizon covers the period: it counts as done
}

// view is the record that a claim or a resolution decides on: a period
// the job's horizon covers is done, record or not.
func (s snapshot) view() (idemstore.Record, bool) {
	if !s.found && s.covered {
		return idemstore.Record{Key: s.rec.Key, Status: idemstore.StatusDone}, true
	}
	return s.rec, s.found
}

func (s *Store) read(ctx context.Context, key idemstore.Key) (snapshot, error) {
	v, err := readScript.Run(ctx, s.client, []string{s.runKey(key), s.jobKey(key.Job)}, key.Period).Slice()
	if err != nil {
		return snapshot{}, err
	}
	if len(v) != 2+recFields {
		return snapshot{}, fmt.Errorf("read script returned %d values, want %d", len(v), 2+recFields)
	}
	sn := snapshot{now: fromMicros(v[0]), covered: i64(v[1]) == 1}
	sn.rec, sn.found = record(key, v[2:])
	return sn, nil
}

// inFrame expresses the deadlines of rec, read at the server's time now, on
// the claimer's clock (req.Now plus what remains of them on the server's
// clock), so that the engine's waits come out right whatever the clocks'
// difference.
func inFrame(req idemstore.ClaimRequest, now time.Time, rec idemstore.Record) idemstore.Record {
	if req.Now.IsZero() {
		return rec
	}
	move := func(t time.Time) time.Time {
		if t.IsZero() {
			return t
		}
		return req.Now.Add(t.Sub(now))
	}
	rec.LeaseUntil, rec.NotBefore = move(rec.LeaseUntil), move(rec.NotBefore)
	return rec
}

// Claim implements [idemstore.Store] with one script (claimScript): it
// reads the key's record and, if the key can be taken, takes it for the
// next attempt number (the fencing token), with a lease to the server's
// time plus req.Lease, in one atomic step. A key that is done, skipped,
// held by a live lease, backing off, unknown or parked is not written.
// A lease whose holder's process is gone ([idemstore.HolderGone]: a
// process of this host that died) does not hold: the claim runs the script
// again, naming that attempt, and takes the key over at once.
//
// Leases are kept on the server's clock: req.Now is ignored, except that
// the LeaseUntil and NotBefore of the returned Record are expressed on the
// claimer's clock (req.Now plus what remains of them on the server's).
// Every write is as durable as the server makes it (see
// [AllowWeakDurability]), so req.Durable needs nothing more.
//
// While most of the store's recent claims found their key done (a
// scheduler on several hosts, triggers repeated after the work is done),
// a claim first reads the record's status, fingerprint and value with one
// HMGET, which the server serves at a fraction of a script's cost, and
// answers a done key from it; a key that is not done goes on to the script.
// Otherwise the script is the only round trip. Either way the answer is
// the same: done is final (a record done stays done, or is pruned under
// the job's horizon, which the script reads).
func (s *Store) Claim(ctx context.Context, req idemstore.ClaimRequest) (idemstore.Claim, error) {
	if err := req.Key.Validate(); err != nil {
		return idemstore.Claim{}, err
	}
	if s.dups.Mostly() {
		v, err := s.client.HMGet(ctx, s.runKey(req.Key), "status", "fingerprint", "value").Result()
		if err == nil && len(v) == 3 && v[0] == "done" {
			s.dups.Saw(true)
			return doneClaim(req, v[1], v[2]), nil
		}
		// Not done, or not readable as a record (a key of the wrong type):
		// the script decides, and names the key in its error.
	}
	c, err := s.claim(ctx, req)
	if err == nil {
		s.dups.Saw(c.State == idemstore.ClaimDone)
	}
	return c, err
}

// doneClaim is the answer for a done key whose stored fingerprint and
// value are fp and value (as read: a string, or nil for none).
func doneClaim(req idemstore.ClaimRequest, fp, value any) idemstore.Claim {
	rec := idemstore.Record{Key: req.Key, Status: idemstore.StatusDone, Fingerprint: str(fp)}
	if b := str(value); b != "" {
		rec.Value = []byte(b)
	}
	if idemstore.Mismatch(rec.Fingerprint, req.Fingerprint) {
		return idemstore.Claim{State: idemstore.ClaimMismatch, Record: rec}
	}
	return idemstore.Claim{State: idemstore.ClaimDone, Record: rec}
}

// claim is Claim by the claim script.
func (s *Store) claim(ctx context.Context, req idemstore.ClaimRequest) (idemstore.Claim, error) {
	lease := req.Lease
	if lease <= 0 {
		lease = idem.DefaultLease
	}
	takeUnknown := "0"
	if req.TakeUnknown {
		takeUnknown = "1"
	}
	goneAttempt, goneOwner := "", ""
	keys := []string{s.runKey(req.Key), s.jobKey(req.Key.Job), s.periodsKey(req.Key.Job), s.jobs}
	for tries := 0; ; tries++ {
		v, err := claimScript.Run(ctx, s.client, keys,
			req.Owner, micros(lease), takeUnknown, goneAttempt, goneOwner, req.Key.Job, req.Key.Period, req.Fingerprint).Slice()
		if err != nil {
			return idemstore.Claim{}, s.opErr("claim", req.Key, err)
		}
		if len(v) == 3 && v[0] == "done" { // a done key, from the script's first read
			return doneClaim(req, v[1], v[2]), nil
		}
		if len(v) != 5+recFields {
			return idemstore.Claim{}, s.opErr("claim", req.Key, fmt.Errorf("claim script returned %d values, want %d", len(v), 5+recFields))
		}
		sn := snapshot{now: fromMicros(v[3]), covered: i64(v[4]) == 1}
		sn.rec, sn.found = record(req.Key, v[5:])
		if i64(v[0]) == 1 {
			rec := sn.rec
			rec.Fingerprint = idemstore.KeptFingerprint(rec.Fingerprint, req.Fingerprint)
			return idemstore.Claim{State: idemstore.ClaimAcquired, Attempt: i64(v[1]), Doubt: i64(v[2]) == 1,
				Record: inFrame(req, sn.now, rec)}, nil
		}
		rec, found := sn.view()
		state, take, _ := idemstore.Decide(rec, found, idemstore.ClaimRequest{Key: req.Key, Now: sn.now, TakeUnknown: req.TakeUnknown,
			Fingerprint: req.Fingerprint})
		if !take || tries >= 3 {
			if take { // the script kept refusing what Decide would take: report the key as busy
				state = idemstore.ClaimBusy
			}
			return idemstore.Claim{State: state, Record: inFrame(req, sn.now, rec)}, nil
		}
		// A running attempt whose lease holds, but whose holder's process
		// is gone: take it over, if it is still that attempt.
		goneAttempt, goneOwner = strconv.FormatInt(sn.rec.Attempt, 10), sn.rec.Owner
	}
}

// Renew implements [idemstore.Store]: the lease runs until the server's
// time plus lease (now is ignored). It fails with [idemstore.ErrLeaseLost]
// if attempt no longer holds the key.
func (s *Store) Renew(ctx context.Context, key idemstore.Key, attempt int64, now time.Time, lease time.Duration) error {
	n, err := renewScript.Run(ctx, s.client, []string{s.runKey(key)}, attempt, micros(lease)).Int64()
	if err != nil {
		return s.opErr("renew", key, err)
	}
	if n == 0 {
		return idemstore.LeaseLost(key, attempt)
	}
	return nil
}

// Finish implements [idemstore.Store], fenced by attempt: it fails with
// [idemstore.ErrLeaseLost], writing nothing, if attempt no longer holds
// the key. A backoff deadline is kept on the server's clock: end.NotBefore
// - end.Now from the server's time. With end.Cursor, a done mark also
// moves the job's cursor forward to the period, in the same script; a
// done mark of an attempt for which a re-run request waits ([Store.Rerun]
// while it ran) gives the period the request's revision, in the same
// script too. A done
// mark is durable when Finish returns as far as the server's fsync policy
// makes it (appendfsync always: fsynced before the reply).
//
// Finish by the same attempt is idempotent: when the reply to the script
// is lost (a dropped connection, a server killed after its fsync), go-redis
// sends it again, and the second run, finding the end this attempt wrote,
// returns nil rather than ErrLeaseLost. An end that another writer
// replaced in between (a Resolve, a later attempt, a Prune of the done
// record) is still refused.
func (s *Store) Finish(ctx context.Context, key idemstore.Key, attempt int64, end idemstore.End) error {
	if err := end.Check("redisstore", key); err != nil {
		return err
	}
	ctx = context.WithoutCancel(ctx) // a finished attempt must be recorded even if the caller gave up
	backoff := ""
	if d, ok := end.BackoffDelay(); ok {
		backoff = strconv.FormatInt(micros(d), 10)
	}
	cursor := "0"
	if end.Cursor {
		cursor = "1"
	}
	var value []byte
	if end.Status == idemstore.StatusDone {
		value = end.Value
	}
	n, err := finishScript.Run(ctx, s.client, []string{s.runKey(key), s.jobKey(key.Job), s.jobsKey(), s.rerunKey(key)},
		attempt, string(end.Status), end.Failures, backoff, end.Error, cursor, key.Job, key.Period, value).Int64()
	if err != nil {
		return s.opErr("finish", key, err)
	}
	if n == 0 {
		return idemstore.LeaseLost(key, attempt)
	}
	return nil
}

// Resolve implements [idemstore.Store]: it settles a key by hand.
// [idem.ResolveDone] marks it done (the work did happen);
// [idem.ResolveRetry] makes it runnable at once with its failure count
// cleared (the work did not happen); [idem.ResolveSkip] settles it as
// skipped. It refuses, with [idemstore.ErrNotResolvable], a key that is
// done (also by the job's horizon) or held by a live attempt (on the
// server's clock), and a retry of a key that has no record. The write is
// fenced by the record it decided on: if the record changed in between,
// Resolve reads it again and decides anew.
func (s *Store) Resolve(ctx context.Context, key idemstore.Key, to idemstore.Resolution) error {
	if err := key.Validate(); err != nil {
		return err
	}
	if err := to.Validate(); err != nil {
		return err
	}
	for tries := 0; tries < 1000; tries++ {
		sn, err := s.read(ctx, key)
		if err != nil {
			return s.opErr("resolve", key, err)
		}
		rec, found := sn.view()
		if err := idemstore.Resolvable(rec, found, to, sn.now); err != nil {
			return err
		}
		status, note := idemstore.Resolved(sn.rec, to)
		f := "0"
		var lease, updated string
		if sn.found {
			f = "1"
			lease, updated = microsText(sn.rec.LeaseUntil), microsText(sn.rec.Updated)
		}
		n, err := resolveScript.Run(ctx, s.client,
			[]string{s.runKey(key), s.jobKey(key.Job), s.periodsKey(key.Job), s.jobsKey(), s.metaKey(), s.wakesKey()},
			f, strconv.FormatInt(sn.rec.Attempt, 10), string(sn.rec.Status), lease, updated,
			string(status), note, key.Job, key.Period).Int64()
		if err != nil {
			return s.opErr("resolve", key, err)
		}
		if n == 1 {
			return nil
		}
		// The record changed since it was read: decide on it again.
	}
	return s.opErr("resolve", key, errors.New("the record kept changing under the resolution"))
}

// microsText is t as the scripts store it ("" for none).
func microsText(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return strconv.FormatInt(t.UnixMicro(), 10)
}

// Lookup implements [idemstore.Store]: it returns the key's record. A
// period that has no record but that the job's horizon covers (it was
// pruned) is reported done. Times are the server's.
func (s *Store) Lookup(ctx context.Context, key idemstore.Key) (idemstore.Record, bool, error) {
	if err := key.Validate(); err != nil {
		return idemstore.Record{}, false, err
	}
	sn, err := s.read(ctx, key)
	if err != nil {
		return idemstore.Record{}, false, s.opErr("lookup", key, err)
	}
	switch {
	case sn.found:
		return sn.rec, true, nil
	case sn.covered:
		return idemstore.Record{Key: key, Status: idemstore.StatusDone}, true, nil
	}
	return idemstore.Record{Key: key}, false, nil
}

// Job implements [idemstore.CatchUpStore]: the job's catch-up cursor and
// retention horizon ("" when none).
func (s *Store) Job(ctx context.Context, job string) (idemstore.JobState, error) {
	v, err := s.client.HMGet(ctx, s.jobKey(job), "cursor", "horizon").Result()
	if err != nil {
		return idemstore.JobState{}, fmt.Errorf("redisstore: job %q: %w", job, err)
	}
	return idemstore.JobState{Job: job, Cursor: str(v[0]), Horizon: str(v[1])}, nil
}

// Start implements [idemstore.CatchUpStore]: it sets the job's cursor to
// before unless the job has one, and reads the job back, in one script. Of
// concurrent first calls, the first to run sets the start; the others read
// it.
func (s *Store) Start(ctx context.Context, job, before string) (idemstore.JobState, error) {
	if err := (idemstore.Key{Job: job, Period: before}).Validate(); err != nil {
		return idemstore.JobState{}, err
	}
	v, err := startScript.Run(ctx, s.client, []string{s.jobKey(job), s.jobsKey()}, job, before).StringSlice()
	if err != nil || len(v) != 2 {
		return idemstore.JobState{}, fmt.Errorf("redisstore: start %q after %q: %v (%d values)", job, before, err, len(v))
	}
	return idemstore.JobState{Job: job, Cursor: v[0], Horizon: v[1]}, nil
}

// Advance implements [idemstore.CatchUpStore]: it moves the job's cursor
// forward to period (byte order, as Go compares strings); a cursor at or
// after period stays.
func (s *Store) Advance(ctx context.Context, job, period string) error {
	if err := (idemstore.Key{Job: job, Period: period}).Validate(); err != nil {
		return err
	}
	if err := advanceScript.Run(ctx, s.client, []string{s.jobKey(job), s.jobsKey()}, job, period).Err(); err != nil {
		return fmt.Errorf("redisstore: advance %q to %q: %w", job, period, err)
	}
	return nil
}

// Prune implements [idemstore.CatchUpStore]: in one script it deletes the
// job's done and skipped records at or before through and raises the
// job's horizon to through; the pruned periods' re-run requests go too.
// It refuses ([idemstore.ErrPruneRefused],
// nothing deleted) a through after the job's cursor when the job has one,
// and a through that would cover a record that is not settled. The script
// reads every record of the job at or before through: the server serves
// nothing else meanwhile, so prune often rather than seldom.
func (s *Store) Prune(ctx context.Context, job, through string) (int64, error) {
	if err := (idemstore.Key{Job: job, Period: through}).Validate(); err != nil {
		return 0, err
	}
	v, err := pruneScript.Run(ctx, s.client, []string{s.jobKey(job), s.periodsKey(job), s.jobsKey(), s.rerunPeriodsKey(job)},
		s.runBase(job), job, through, s.rerunBase(job)).Slice()
	if err != nil || len(v) != 5 {
		return 0, fmt.Errorf("redisstore: prune %q through %q: %v (%d values)", job, through, err, len(v))
	}
	if err := idemstore.Prunable(job, through, str(v[1]), i64(v[2]), str(v[3])); err != nil {
		return 0, err
	}
	if i64(v[0]) != 1 {
		return 0, fmt.Errorf("redisstore: prune %q through %q: the script refused without a reason", job, through)
	}
	return i64(v[4]), nil
}

// List implements [idemstore.Lister]: the records that match f, ordered by
// job, then period (byte order), read in one script. Times are the
// server's.
func (s *Store) List(ctx context.Context, f idemstore.Filter) ([]idemstore.Record, error) {
	v, err := listScript.Run(ctx, s.client, []string{s.jobsKey()}, s.prefix, f.Job, string(f.Status), max(f.Limit, 0)).Slice()
	if err != nil {
		return nil, fmt.Errorf("redisstore: list: %w", err)
	}
	recs := []idemstore.Record{}
	for i := 0; i+2+recFields <= len(v); i += 2 + recFields {
		r, _ := record(idemstore.Key{Job: str(v[i]), Period: str(v[i+1])}, v[i+2:i+2+recFields])
		recs = append(recs, r)
	}
	return recs, nil
}

// opError is an error of the server, with the operation and key.
type opError struct {
	op  string
	key idemstore.Key
	err error
}

func (e *opError) Error() string {
	return "redisstore: " + e.op + " " + e.key.String() + ": " + e.err.Error()
}
func (e *opError) Unwrap() error { return e.err }

func (s *Store) opErr(op string, key idemstore.Key, err error) error {
	return &opError{op: op, key: key, err: err}
}
