package pgledger

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/maphash"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemstore"
	"github.com/jackc/pgx/v5"
)

var (
	_ idemstore.ItemStore           = (*Ledger)(nil)
	_ idemstore.ItemTxStore[pgx.Tx] = (*Ledger)(nil)
	_ idemstore.ItemRecorder        = (*Ledger)(nil)
	_ idemstore.ItemRecordTurns     = (*Ledger)(nil)
	_ idemstore.ItemRecordTurns     = (*DBLedger)(nil)
)

// The items of [idem.Each] live in four tables: item_set, one row per (job,
// period, item) that AddItems recorded, which makes an item recorded twice
// count once; item_chunks, one row per chunk (the new items of one
// AddItems, or the items of one chunk of RecordItems, which Each uses and
// which writes no row per item: SealItems checks its chunks against the
// rest of the set in one pass), with its status, lease, attempt and
// positions; item_lists, a chunk's item ids in order (an array), written
// once (and once more by SealItems if it removes items from an unchecked
// chunk); and item_state, the records of the items
// whose attempt did not end done (and of the items a version-2 schema
// recorded), claimed one by one. Whether a period's item set is complete is
// in itemsets. As for keys, leases and backoff deadlines are kept on the
// server's clock (clock_timestamp()); of the times the engine passes only
// the durations between them count (LeaseUntil - Now, NotBefore - Now).
// Every commit is durable (synchronous_commit on, PostgreSQL's default),
// except AddItems' and RecordItems', and the chunk claims of a request
// that does not ask for durability (AtLeastOnce): those do not wait for
// their WAL flush (see AddItems and claimItems).

// AddItems implements [idemstore.ItemStore] with statements sent in one batch
// (one round trip), which PostgreSQL runs as one implicit transaction: the
// first locks the period's itemsets row (concurrent AddItems of the period
// take turns there); the second inserts the whole batch into item_set (an
// unnest of an array, ON CONFLICT DO NOTHING) unless the set is sealed, and
// makes the items that were new one chunk, numbered after the period's
// last.
//
// Its commit does not wait for its WAL flush (synchronous_commit off for
// the batch): nothing is promised of an item set before SealItems, whose
// synchronous commit flushes the WAL through every AddItems before it, as
// does the synchronous commit of any claim or done mark of a chunk. A
// server crash can only lose the last AddItems of a period together with
// everything committed after them, so the set that survives is the one an
// unsealed period's next Each completes by generating the items again.
// Concurrent AddItems of a period take turns on its itemsets row; they no
// longer hold it for a WAL flush each.
//
// A batch given again as it was (the same items in the same order: another
// host generating the period's items, or the next Each after a crash) adds
// nothing, and is known to at the cost of one read by primary key and
// without waiting for the period's row: each chunk keeps the digest of the
// batch that made it (SHA-256 of its items, NUL-separated), and AddItems
// first looks for a chunk of the period with the batch's digest (or a
// sealed set). Only a batch not found there is recorded item by item, as
// above; it looks for the digest again after taking its turn on the
// period's row, so that of two hosts recording the same batch at once the
// second writes nothing. Either way the items recorded are the same: a
// batch with the digest of a chunk was recorded whole when that chunk was
// made (its items new then went into the chunk, the others were in the set
// already).
func (l *core) AddItems(ctx context.Context, key idemstore.Key, items []string) error {
	if len(items) == 0 {
		return nil
	}
	digest := batchDigest(items)
	var recorded bool
	if err := l.db.queryRow(ctx, l.q.batchRecorded, []any{key.Job, key.Period, digest}, &recorded); err != nil {
		return l.opErr("add items", key, err)
	}
	if recorded {
		return nil
	}
	if _, err := l.db.batch(ctx, []stmt{
		{query: syncOffSQL},
		{l.q.openItems, []any{key.Job, key.Period}},
		{l.q.addItems, []any{key.Job, key.Period, items, digest}},
	}); err != nil {
		return l.opErr("add items", key, err)
	}
	return nil
}

// RecordItems implements [idemstore.ItemRecorder]: AddItems without
// item_set, for several chunks at once. One read (by the digest index)
// finds the chunks recorded before (the same chunk given again as it was:
// another host generating the same items) or a sealed set; the others, each
// without its duplicates (each at its first place), become unchecked chunks
// in one statement (recordChunksSQL, which looks for the digests again),
// sent in one batch (one round trip, one transaction) that takes its turn
// on the period's itemsets row and does not wait for its WAL flush, as
// AddItems'. Nothing is written per item: SealItems checks the unchecked
// chunks against the rest of the set in one pass, and no unchecked chunk is
// claimed before.
func (l *core) RecordItems(ctx context.Context, key idemstore.Key, chunks [][]string) error {
	_, err := l.recordItems(ctx, l.db, key, chunks, true, false)
	return err
}

// recordItems is RecordItems on q; wrote is how many chunks it made. When
// read is false it sends the chunks without reading first which of them
// are recorded (a turn that found none, and made the others itself: the
// statement looks for their digests all the same). distinct says that the
// chunks' items are known to differ from one another (a turn's hashes):
// they are sent as given.
func (l *core) recordItems(ctx context.Context, q conn, key idemstore.Key, chunks [][]string, read, distinct bool) (wrote int, err error) {
	hexes := digestHexes(chunks)
	if len(hexes) == 0 {
		return 0, nil
	}
	var recorded []string
	if read {
		var sealed bool
		if err := q.queryRow(ctx, l.q.chunksRecorded, []any{key.Job, key.Period, hexes}, &sealed, &recorded); err != nil {
			return 0, l.opErr("record items", key, err)
		}
		if sealed {
			return 0, nil
		}
	}
	args, made, err := chunkArgs(key, chunks, hexes, recorded, distinct)
	if err != nil {
		return 0, l.opErr("record items", key, err)
	}
	if made == 0 {
		return 0, nil
	}
	n, err := q.batch(ctx, []stmt{{query: syncOffGenericSQL}, {l.q.openItems, []any{key.Job, key.Period}},
		{l.q.recordChunks, args}})
	if err != nil {
		return 0, l.opErr("record items", key, err)
	}
	return int(n[2]), nil
}

// digestHexes are the digests of the chunks that are not empty, in hex.
func digestHexes(chunks [][]string) []string {
	hexes := make([]string, 0, len(chunks))
	for _, c := range chunks {
		if len(c) > 0 {
			hexes = append(hexes, hex.EncodeToString(batchDigest(c)))
		}
	}
	return hexes
}

// chunkArgs are recordChunksSQL's arguments for the chunks (hexes: their
// digests) that are not empty and whose digest is not in recorded: one
// text of their items (joined by itemSep) and the bounds of each in it,
// and their digests;
// made is how many chunks that is. Unless distinct, each chunk's
// duplicates are left out. An empty item, or one holding itemSep, is
// refused (Each refuses both before it records).
func chunkArgs(key idemstore.Key, chunks [][]string, hexes, recorded []string, distinct bool) (args []any, made int, err error) {
	size := 0
	for _, c := range chunks {
		for _, it := range c {
			size += len(it) + len(itemSep)
		}
	}
	var items strings.Builder
	items.Grow(size)
	n, digests := 0, make([]string, 0, len(chunks))
	from, to := make([]int64, 0, len(chunks)), make([]int64, 0, len(chunks))
	d := 0
	for _, c := range chunks {
		if len(c) == 0 {
			continue
		}
		h := hexes[d]
		d++
		if slices.Contains(recorded, h) {
			continue
		}
		from = append(from, int64(n+1))
		if !distinct {
			c = distinctItems(c)
		}
		for _, it := range c {
			switch {
			case it == "":
				return nil, 0, errors.New("an item is empty")
			case strings.Contains(it, itemSep):
				return nil, 0, fmt.Errorf("item %q has a control character U+001F", it)
			}
			if n > 0 {
				items.WriteString(itemSep)
			}
			items.WriteString(it)
			n++
		}
		to, digests = append(to, int64(n)), append(digests, h)
	}
	return []any{key.Job, key.Period, items.String(), from, to, digests}, len(digests), nil
}

// itemSep joins a chunk's items into one text on their way to and from the
// server (recordChunksSQL splits it, claimChunkSQL joins them): one string
// a chunk instead of one an item, which pgx allocates for each element of
// a text array it sends or reads. No item holds it: an item with a control
// character is refused (chunkArgs; Each refuses every control character),
// and so is an empty one, which a text of its own would not tell from no
// item at all.
const itemSep = "\x1f"

// RecordTurn implements [idemstore.ItemRecordTurns]. The turn is the
// period's session-level advisory lock (pg_advisory_lock), taken on one of
// the pool's connections, which the turn holds until Seal or Release: it
// records and seals the set on that connection, each statement as
// RecordItems and SealItems run them (what it recorded commits as it goes,
// and a later recorder finds it by digest), then unlocks the lock and gives
// the connection back. The wait for the lock is bounded by lock_timeout, set
// to wait for that statement alone; the set's sealed flag is read by a
// second statement of the same round trip, once the lock is taken, so it
// sees what the last holder committed. The server gives the lock back when
// the holder's connection ends: a recorder whose process died, or whose
// connection broke, hands the turn on at once. A connection whose unlock
// fails or finds no lock is closed, not given back to the pool, so no
// connection of the pool keeps a turn.
//
// The turn holds one connection, and each caller that waits for it holds
// one: a pool of a single connection is enough for a single caller. A wait
// that lock_timeout (or a statement_timeout of the server's) ends returns a
// turn not held, which records as RecordItems and SealItems do.
//
// The turn is a session's lock: behind a pooler that hands one client
// connection's transactions to different server sessions (PgBouncer's
// transaction mode), the unlock may reach another session, and the lock
// stays with a server session that no caller holds; the period's later
// callers then wait a lease for the turn, and record the set themselves.
// Nothing is lost or done twice, but give the ledger's pool a session of
// its own (a direct connection, or session pooling).
func (l *core) RecordTurn(ctx context.Context, key idemstore.Key, wait time.Duration) (idemstore.ItemTurn, error) {
	c, err := l.db.pin(ctx)
	if err != nil {
		return nil, l.opErr("record items: turn", key, err)
	}
	id := l.lockID("items", key.Job+"\x00"+key.Period)
	ms := strconv.FormatInt(max(wait.Milliseconds(), 1), 10)
	var sealed, alone, unlocked bool
	err = c.batchRow(ctx, []stmt{{recordTurnSQL, []any{ms, id}}}, l.q.turnTaken, []any{key.Job, key.Period, id}, &sealed, &alone, &unlocked)
	if err != nil {
		// A session-level lock outlives a failed transaction: whether or
		// not the lock was taken, the session ends here.
		c.release(true)
		if ctx.Err() == nil && (lockTimedOut(err) || statementCanceled(err)) {
			return &recordTurn{l: l, key: key}, nil
		}
		return nil, l.opErr("record items: turn", key, err)
	}
	if sealed { // the lock is given back already (if not, the session ends)
		c.release(!unlocked)
		return &recordTurn{l: l, key: key, sealed: true}, nil
	}
	return &recordTurn{l: l, key: key, c: c, id: id, sealed: sealed, alone: alone, seed: maphash.MakeSeed(), hashes: map[uint64]struct{}{}}, nil
}

// turnHashes is how many items a turn keeps a hash of, at most, to know
// that the set it recorded holds each item once: a larger set is checked
// by the seal on the server.
const turnHashes = 100_000

// recordTurn is a turn of RecordTurn: c holds the period's advisory lock
// id; nil when the wait for it ended first, or once the turn has ended.
//
// A turn keeps a 64-bit hash of every item it was given (up to
// turnHashes), and counts the chunks it made: when all the hashes differ,
// every item it recorded differs from the others, and when, at the seal,
// the period holds exactly the chunks it made (and no AddItems item), the
// set needs no check: sealRecordedSQL marks its chunks checked without
// reading their items. Anything else (a hash seen twice, a chunk another
// caller made, a larger set) seals with the check of SealItems.
type recordTurn struct {
	l      *core
	key    idemstore.Key
	c      pinned
	id     int64
	sealed bool
	alone  bool                // the period had no chunk when the turn was taken
	wrote  int                 // chunks the turn made
	seed   maphash.Seed        // of hashes
	hashes map[uint64]struct{} // of the items given; nil once they do not prove the set distinct
}

func (r *recordTurn) Sealed() bool { return r.sealed }

func (r *recordTurn) RecordItems(ctx context.Context, chunks [][]string) error {
	if r.c == nil {
		return r.l.RecordItems(ctx, r.key, chunks)
	}
	r.hash(chunks)
	// Hashes that all differ prove the items differ: no chunk needs its
	// duplicates removed.
	wrote, err := r.l.recordItems(ctx, r.c, r.key, chunks, !r.alone, r.hashes != nil)
	r.wrote += wrote
	return err
}

// hash adds the hashes of the chunks' items to r.hashes, or drops them
// (nil) once two are equal or there would be more than turnHashes.
func (r *recordTurn) hash(chunks [][]string) {
	if r.hashes != nil && len(r.hashes) == 0 {
		// Room for the hashes of about 16 calls like the first (record's
		// first call holds the ids of a chunk per worker, later ones 16
		// chunks): the map seldom grows.
		n := 0
		for _, c := range chunks {
			n += len(c)
		}
		r.hashes = make(map[uint64]struct{}, min(16*n, turnHashes))
	}
	for _, c := range chunks {
		if r.hashes == nil {
			break
		}
		for _, it := range c {
			h := maphash.String(r.seed, it)
			if _, seen := r.hashes[h]; seen || len(r.hashes) == turnHashes {
				r.hashes = nil
				break
			}
			r.hashes[h] = struct{}{}
		}
	}
}

func (r *recordTurn) Seal(ctx context.Context, last [][]string) error {
	if r.c == nil {
		if err := r.l.RecordItems(ctx, r.key, last); err != nil {
			return err
		}
		return r.l.SealItems(ctx, r.key)
	}
	defer r.Release()
	c, pgxPool := r.c.(pgxConn)
	if pgxPool && r.alone {
		r.hash(last)
	} else if err := r.RecordItems(ctx, last); err != nil {
		return err
	} else {
		last = nil
	}
	if r.hashes != nil && (r.wrote > 0 || len(last) > 0) {
		var done bool
		var err error
		if pgxPool {
			var unlocked bool
			done, unlocked, err = r.sealAndUnlock(ctx, c, last)
			if err == nil && unlocked { // sealed (by this turn, or another caller), and the turn given back
				r.c = nil
				c.release(false)
				return nil
			}
		} else {
			err = r.c.batchRow(ctx, []stmt{{r.l.q.openItems, []any{r.key.Job, r.key.Period}}},
				r.l.q.sealRecorded, []any{r.key.Job, r.key.Period, r.wrote}, &done)
		}
		if err != nil || done {
			if err != nil {
				err = r.l.opErr("seal items", r.key, err)
			}
			return err
		}
	} else if len(last) > 0 { // not sent yet: their hashes proved nothing
		if err := r.RecordItems(ctx, last); err != nil {
			return err
		}
	}
	return r.l.sealItems(ctx, r.c, r.key)
}

// sealAndUnlock is the turn's last chunks (of a turn that found the
// period empty: every chunk it gives is made), its seal without the check
// on a pgx connection, and its unlock, in one round trip: the chunks and
// the seal in a transaction of their own (BEGIN ... COMMIT, synchronous),
// then the turn's lock given back if the set is sealed, so that the
// callers waiting for the turn find it sealed. An error leaves the
// connection to Release, which closes it.
func (r *recordTurn) sealAndUnlock(ctx context.Context, c pgxConn, last [][]string) (done, unlocked bool, err error) {
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	b.Queue(r.l.q.openItems, r.key.Job, r.key.Period)
	steps := 2
	if hexes := digestHexes(last); len(hexes) > 0 {
		args, made, err := chunkArgs(r.key, last, hexes, nil, true)
		if err != nil {
			return false, false, r.l.opErr("record items", r.key, err)
		}
		b.Queue(r.l.q.recordChunks, args...)
		r.wrote += made
		steps++
	}
	b.Queue(r.l.q.sealRecorded, r.key.Job, r.key.Period, r.wrote)
	b.Queue("COMMIT")
	b.Queue(r.l.q.unlockSealed, r.id, r.key.Job, r.key.Period)
	br := c.c.SendBatch(ctx, b)
	defer func() {
		if cerr := br.Close(); err == nil {
			err = cerr
		}
	}()
	for range steps { // BEGIN, the itemsets row, the chunks
		if _, err := br.Exec(); err != nil {
			return false, false, err
		}
	}
	if err := br.QueryRow().Scan(&done); err != nil {
		return false, false, err
	}
	if _, err := br.Exec(); err != nil { // COMMIT
		return false, false, err
	}
	if err := br.QueryRow().Scan(&unlocked); err != nil {
		return false, false, err
	}
	return done, unlocked, nil
}

func (r *recordTurn) Release() {
	if r.c == nil {
		return
	}
	c := r.c
	r.c = nil
	ctx, cancel := context.WithTimeout(context.Background(), closeWait)
	defer cancel()
	var unlocked bool
	err := c.queryRow(ctx, `SELECT pg_advisory_unlock($1)`, []any{r.id}, &unlocked)
	c.release(err != nil || !unlocked)
}

// distinctItems is items without their duplicates, each at its first
// place; items itself when it has none.
func distinctItems(items []string) []string {
	seen := make(map[string]struct{}, len(items))
	var out []string
	for i, it := range items {
		if _, dup := seen[it]; dup {
			if out == nil {
				out = slices.Clone(items[:i])
			}
			continue
		}
		seen[it] = struct{}{}
		if out != nil {
			out = append(out, it)
		}
	}
	if out == nil {
		return items
	}
	return out
}

// batchDigest is the digest of an AddItems batch as given: SHA-256 of its
// items, each followed by a NUL (no item holds one).
func batchDigest(items []string) []byte {
	n := 0
	for _, it := range items {
		n += len(it) + 1
	}
	b := make([]byte, 0, n)
	for _, it := range items {
		b = append(append(b, it...), 0)
	}
	sum := sha256.Sum256(b)
	return sum[:]
}

// SealItems implements [idemstore.ItemStore]: in one batch (one round
// trip, one transaction, durable) it takes its turn on the period's
// itemsets row, checks the chunks RecordItems made against the rest of the
// set, removing from them the items recorded before them, and seals the
// set (see sealItemsSQL). The check is one pass over the period's item
// lists (a hash aggregate), once per period: a SealItems that finds the
// set sealed reads nothing more.
func (l *core) SealItems(ctx context.Context, key idemstore.Key) error {
	return l.sealItems(ctx, l.db, key)
}

func (l *core) sealItems(ctx context.Context, q conn, key idemstore.Key) error {
	if _, err := q.batch(ctx, []stmt{
		{l.q.openItems, []any{key.Job, key.Period}},
		{l.q.sealItems, []any{key.Job, key.Period}},
	}); err != nil {
		return l.opErr("seal items", key, err)
	}
	return nil
}

// CountItems implements [idemstore.ItemStore], in one statement. An item of a
// chunk counts as the chunk's status (pending or running) until the chunk
// settles it: done, or a record of its own, counted by its status.
// NextRetry, the earliest backoff deadline of a failed item, is expressed on
// this process's clock: time.Now() plus what remains of the deadline on the
// server's clock (so a wait for it is right whatever the clocks'
// difference; a deadline already passed on the server's clock comes out in
// this process's past), and Now is that time.Now(): the engine waits
// NextRetry - Now, on whatever clock its calls run.
func (l *core) CountItems(ctx context.Context, key idemstore.Key) (idemstore.ItemCounts, error) {
	var c idemstore.ItemCounts
	var chunkPending, chunkRunning, settled, fromChunks int64
	var next *time.Time
	var dbNow time.Time
	err := queryRowGeneric(ctx, l.db, l.q.countItems, []any{key.Job, key.Period}, &c.Sealed,
		&chunkPending, &chunkRunning, &settled,
		&c.Pending, &c.Running, &c.Failed, &c.Done, &c.Unknown, &c.Parked, &fromChunks, &next,
		&dbNow)
	if err != nil {
		return idemstore.ItemCounts{}, l.opErr("count items", key, err)
	}
	c.Pending += chunkPending
	c.Running += chunkRunning
	c.Done += settled - fromChunks // the records of items that left a chunk count by their status
	if next != nil {
		c.Now = time.Now()
		c.NextRetry = c.Now.Add(next.Sub(dbNow))
	}
	return c, nil
}

// ClaimItems implements [idemstore.ItemStore]. A chunk is taken with one
// statement, UPDATE ... WHERE ctid = ANY (ARRAY(SELECT ... FOR UPDATE SKIP
// LOCKED)) RETURNING, which also returns the chunk's unsettled items: a
// pending chunk (the first added first), else one whose lease expired (see
// claimChunkSQL). Only when no chunk is runnable are single items taken,
// with a second statement of the same form (see claimItemsSQL for the
// plan), in this order: pending, failed whose backoff has passed, running
// whose lease expired (Doubt; the abandoned attempt counts as a failure and
// its last error says so), unknown if req.TakeUnknown (Doubt); within each,
// oldest change first; they come back in item order. The second statement
// is sent only when the first, finding no chunk, found that the period has
// records of single items a claim may take. Claimers on any number of hosts
// take disjoint chunks and items without waiting for each other. A first
// statement that finds no chunk also returns the owners of the period's
// running chunks and items whose leases hold; when no work was found, the
// work of those whose process is gone ([idemstore.HolderGone]: a process
// of this host that died) is claimed as if their leases had expired, by
// the same statements. A claim that finds nothing thus costs one round
// trip while the period has no single items.
//
// The lease runs until the server's time plus req.Lease (idem.DefaultLease
// if not positive); req.Now is ignored. A req.N below 1 counts as 1.
func (l *core) ClaimItems(ctx context.Context, key idemstore.Key, req idemstore.ItemClaimRequest) (idemstore.ItemBatch, error) {
	n := max(req.N, 1)
	lease := req.Lease
	if lease <= 0 {
		lease = idem.DefaultLease
	}
	gone := []string{}
	for {
		b, owners, err := l.claimItems(ctx, key, req, n, lease, gone)
		if err != nil || len(b.Items) > 0 || b.Chunk != 0 || len(gone) > 0 {
			return b, err
		}
		// Nothing runnable: are some holders' processes gone?
		for _, o := range owners {
			if idemstore.HolderGone(o) {
				gone = append(gone, o)
			}
		}
		if len(gone) == 0 {
			return b, nil
		}
	}
}

// claimItems is one pass of ClaimItems: a chunk, else single items if the
// period has any a claim may find; the work of the owners in gone counts
// as if their leases had expired. When it took no chunk, owners are those
// of the running chunks and items whose leases held.
func (l *core) claimItems(ctx context.Context, key idemstore.Key, req idemstore.ItemClaimRequest, n int, lease time.Duration, gone []string) (_ idemstore.ItemBatch, owners []string, _ error) {
	var b idemstore.ItemBatch
	var size, doubt, failures int
	var joined string // the chunk's items after its position, joined by itemSep
	var singles bool
	// A claim that need not survive power loss (AtLeastOnce) does not wait
	// for its WAL flush: the synchronous commit of the chunk's first window
	// flushes the WAL through it, as a Run's done mark does its claim.
	var pre []stmt
	if !req.Durable {
		pre = []stmt{{query: syncOffGenericSQL}}
	}
	err := l.db.batchRow(ctx, pre, l.q.claimChunk, []any{key.Job, key.Period, req.Owner, micros(lease), n, gone},
		&b.Chunk, &b.Attempt, &size, &b.Pos, &doubt, &failures, &joined, &singles, &owners)
	if err != nil {
		return idemstore.ItemBatch{}, nil, l.opErr("claim items", key, err)
	}
	if b.Chunk != 0 {
		var items []string
		if size > b.Pos {
			items = strings.Split(joined, itemSep)
		}
		if len(items) != size-b.Pos {
			return idemstore.ItemBatch{}, nil, l.opErr("claim items", key,
				fmt.Errorf("chunk %d's item list has %d items after position %d, want %d", b.Chunk, len(items), b.Pos, size-b.Pos))
		}
		b.Items = make([]idemstore.ItemClaim, len(items))
		for i, it := range items {
			c := idemstore.ItemClaim{Item: it, Attempt: b.Attempt}
			if b.Pos+i < doubt { // the abandoned attempt had marked it started
				c.Doubt, c.Failures = true, failures
			}
			b.Items[i] = c
		}
		return b, nil, nil
	}
	if !singles {
		return idemstore.ItemBatch{}, owners, nil
	}
	claims := []idemstore.ItemClaim{}
	err = l.db.query(ctx, l.q.claimItems, []any{key.Job, key.Period, req.Owner, micros(lease), int64(n), req.TakeUnknown, gone,
		idemstore.NoteDied, idemstore.NoteExpired}, func(scan func(...any) error) error {
		var c idemstore.ItemClaim
		err := scan(&c.Item, &c.Attempt, &c.Failures, &c.Doubt)
		claims = append(claims, c)
		return err
	})
	if err != nil {
		return idemstore.ItemBatch{}, nil, l.opErr("claim items", key, err)
	}
	slices.SortFunc(claims, func(a, b idemstore.ItemClaim) int { return cmp.Compare(a.Item, b.Item) })
	return idemstore.ItemBatch{Items: claims}, owners, nil
}

// execEach runs query once per item, in one batch (conn.batch: all or
// nothing; with pgx, one round trip), and returns the items whose statement
// changed no row. args(i) are the arguments of item i's statement.
func execEach(ctx context.Context, q conn, query string, items []string, args func(i int) []any) (unchanged []string, err error) {
	stmts := make([]stmt, len(items))
	for i := range items {
		stmts[i] = stmt{query, args(i)}
	}
	n, err := q.batch(ctx, stmts)
	if err != nil {
		return nil, err
	}
	for i, it := range items {
		if n[i] == 0 {
			unchanged = append(unchanged, it)
		}
	}
	return unchanged, nil
}

// backoff is an end's backoff deadline as a duration from the server's
// time, in microseconds (NotBefore - Now); nil (NULL) when it has none.
func backoff(e idemstore.ItemEnd) *float64 {
	if e.NotBefore.IsZero() {
		return nil
	}
	d := e.NotBefore.Sub(e.Now)
	if e.Now.IsZero() {
		d = time.Until(e.NotBefore)
	}
	us := micros(d)
	return &us
}

// finishItems ends single items' attempts, each with a statement fenced by
// its attempt, and returns the items it did not end: their attempt changed,
// or they are no longer running. A done item's failure count is cleared.
func (l *core) finishItems(ctx context.Context, q conn, key idemstore.Key, ends []idemstore.ItemEnd) (lost []string, err error) {
	if err := idemstore.CheckEnds(ends); err != nil {
		return nil, err
	}
	return execEach(ctx, q, l.q.finishItem, idemstore.EndItems(ends), func(i int) []any {
		e := ends[i]
		failures := e.Failures
		if e.Status == idemstore.StatusDone {
			failures = 0
		}
		return []any{key.Job, key.Period, e.Item, e.Attempt, string(e.Status), failures, backoff(e), e.Error}
	})
}

// finishChunk moves step's chunk past ends, fenced by its attempt and
// position, and writes the records of the ends that are not done, in one
// statement (finishChunkSQL); moved is false when the attempt no longer
// holds the chunk, and then nothing was written.
func (l *core) finishChunk(ctx context.Context, q conn, key idemstore.Key, step idemstore.ItemStep, ends []idemstore.ItemEnd) (moved bool, err error) {
	if err := idemstore.CheckEnds(ends); err != nil {
		return false, err
	}
	var (
		items, statuses, errs []string
		attempts              []int64
		failures              []int32
		backoffs              []*float64
	)
	for _, e := range ends {
		if e.Status == idemstore.StatusDone {
			continue
		}
		items, statuses, errs = append(items, e.Item), append(statuses, string(e.Status)), append(errs, e.Error)
		attempts, failures, backoffs = append(attempts, e.Attempt), append(failures, int32(e.Failures)), append(backoffs, backoff(e))
	}
	lease := idem.DefaultLease
	switch {
	case !step.LeaseUntil.IsZero() && !step.Now.IsZero():
		lease = step.LeaseUntil.Sub(step.Now)
	case !step.LeaseUntil.IsZero():
		lease = time.Until(step.LeaseUntil)
	}
	args := []any{key.Job, key.Period, step.Chunk, step.Attempt, step.From + len(ends), max(step.Next, 0), micros(lease), step.From}
	if len(items) == 0 { // every item done: no records to write
		rows, err := q.exec(ctx, l.q.finishChunkDone, args...)
		return rows == 1, err
	}
	var rows, recorded int64
	err = q.queryRow(ctx, l.q.finishChunk, append(args, items, statuses, attempts, failures, backoffs, errs), &rows, &recorded)
	if err != nil {
		return false, err
	}
	if rows == 1 && recorded != int64(len(items)) { // cannot happen: the statement is atomic
		return false, fmt.Errorf("chunk %d: %d of %d records written", step.Chunk, recorded, len(items))
	}
	return rows == 1, nil
}

// FinishItems implements [idemstore.ItemStore]. A chunk's window is one
// statement: the fenced UPDATE of the chunk's row and the INSERT of the
// records of the items that did not end done (an unnest of arrays), which
// runs only if the UPDATE found the chunk; the UPDATE alone when every item
// ended done. Single items get one UPDATE each,
// fenced by its attempt, sent in one batch (one round trip), which
// PostgreSQL runs as one implicit transaction. Either way all of it commits,
// durably, or none does. The chunk's lease runs until the server's time
// plus step.LeaseUntil - step.Now (idem.DefaultLease when step has no
// times); a backoff deadline is kept on the server's clock the same way:
// end.NotBefore - end.Now from the server's time. The ends are recorded even
// if ctx is cancelled.
func (l *core) FinishItems(ctx context.Context, key idemstore.Key, step idemstore.ItemStep, ends []idemstore.ItemEnd) ([]string, error) {
	if len(ends) == 0 {
		return nil, nil
	}
	ctx = context.WithoutCancel(ctx) // finished attempts must be recorded even if the caller gave up
	if step.Chunk == 0 {
		lost, err := l.finishItems(ctx, l.db, key, ends)
		if err != nil {
			return nil, l.opErr("finish items", key, err)
		}
		return lost, nil
	}
	moved, err := l.finishChunk(ctx, l.db, key, step, ends)
	if err != nil {
		return nil, l.opErr("finish items", key, err)
	}
	if !moved {
		return idemstore.EndItems(ends), nil
	}
	return nil, nil
}

// FinishItemsTx implements [idemstore.ItemTxStore] with [pgx.Tx]: the window runs
// in one transaction. It first fences the claims: a chunk's by its attempt
// and the window's position (one UPDATE, which locks the chunk's row until
// the transaction ends; if the attempt no longer holds the chunk, no fn runs
// and every claim is returned in lost), single items' each by its own
// attempt (one statement per claim, in one round trip, which locks the rows
// of those that still hold their item; the others are returned in lost and
// not run). Then fn runs for each claim, in a savepoint of its own (an item
// whose fn fails is rolled back to it, alone, and its end taken from
// failed); the chunk moves forward (or the single items' ends are written)
// with the records of the items that did not end done, and the transaction
// commits, durably. fn must use tx for its writes. [idemstore.RunItemWindow]
// runs these steps over the transaction.
//
// The window's transaction holds its chunk's row lock (or its items') while
// fn runs, so another host that finds the lease expired passes it over
// instead of taking it; keep a window ([idem.WithBatch]) well within the
// lease all the same. Each item's savepoint is a subtransaction: a window of
// more than 64 items that write is more than PostgreSQL caches per
// transaction, which other sessions' snapshots pay for while it runs; the
// default window of 100 is fine for most databases, lower it on a very busy
// one.
func (l *Ledger) FinishItemsTx(ctx context.Context, key idemstore.Key, step idemstore.ItemStep, claims []idemstore.ItemClaim, fn func(tx pgx.Tx, c idemstore.ItemClaim) error, failed func(c idemstore.ItemClaim, err error) idemstore.ItemEnd) ([]idemstore.ItemEnd, []string, error) {
	return finishItemsTx(ctx, &l.core, key, step, claims, func(t tx) pgx.Tx { return t.(pgxTx).tx }, fn, failed)
}

// finishItemsTx is FinishItemsTx on either connection; raw gives fn the
// adapter's own transaction.
func finishItemsTx[T any](ctx context.Context, l *core, key idemstore.Key, step idemstore.ItemStep, claims []idemstore.ItemClaim, raw func(tx) T, fn func(tx T, c idemstore.ItemClaim) error, failed func(c idemstore.ItemClaim, err error) idemstore.ItemEnd) ([]idemstore.ItemEnd, []string, error) {
	if len(claims) == 0 {
		return nil, nil, nil
	}
	tx, err := l.db.begin(ctx)
	if err != nil {
		return nil, nil, l.opErr("run items", key, err)
	}
	defer tx.rollback(context.WithoutCancel(ctx))
	ends, lost, err := idemstore.RunItemWindow(ctx, &itemWindow[T]{l: l, tx: tx, raw: raw(tx)}, key, step, claims, fn, failed)
	if idemstore.IsStop(err) {
		return nil, nil, err
	}
	if err != nil {
		return nil, nil, l.opErr("run items", key, err)
	}
	if err := tx.commit(ctx); err != nil {
		return nil, nil, l.opErr("run items: commit", key, err)
	}
	return ends, lost, nil
}

// itemWindow is a window of FinishItemsTx in a transaction
// ([idemstore.ItemWindow]); raw is the transaction handed to fn.
type itemWindow[T any] struct {
	l    *core
	tx   tx
	raw  T
	open bool // an item's savepoint is open
}

func (w *itemWindow[T]) Tx() T { return w.raw }

// Fence locks the chunk's row, fenced by its attempt and the window's
// position (one UPDATE), or the single items' rows, each fenced by its own
// attempt (one statement per claim, in one round trip).
func (w *itemWindow[T]) Fence(ctx context.Context, key idemstore.Key, step idemstore.ItemStep, claims []idemstore.ItemClaim) ([]string, error) {
	items := make([]string, len(claims))
	for i, c := range claims {
		items[i] = c.Item
	}
	if step.Chunk != 0 {
		n, err := w.tx.exec(ctx, w.l.q.fenceChunk, key.Job, key.Period, step.Chunk, step.Attempt, step.From)
		if err != nil || n == 1 {
			return nil, err
		}
		return items, nil
	}
	return execEach(ctx, w.tx, w.l.q.fenceItem, items, func(i int) []any {
		return []any{key.Job, key.Period, claims[i].Item, claims[i].Attempt}
	})
}

// Savepoint replaces the previous item's savepoint, if any, in the same
// round trip.
func (w *itemWindow[T]) Savepoint(ctx context.Context) error {
	q := `SAVEPOINT idem_item`
	if w.open {
		q = `RELEASE SAVEPOINT idem_item; SAVEPOINT idem_item`
	}
	_, err := w.tx.exec(ctx, q)
	w.open = err == nil
	return err
}

func (w *itemWindow[T]) RollbackTo(ctx context.Context) error {
	_, err := w.tx.exec(ctx, `ROLLBACK TO SAVEPOINT idem_item`)
	return err
}

// Record moves the chunk forward with the records of the items that did
// not end done (one statement), or writes the single items' ends (one
// batch); the fence's locks keep every attempt holding its work.
func (w *itemWindow[T]) Record(ctx context.Context, key idemstore.Key, step idemstore.ItemStep, ends []idemstore.ItemEnd) error {
	if step.Chunk != 0 {
		moved, err := w.l.finishChunk(ctx, w.tx, key, step, ends)
		if err == nil && !moved { // cannot happen while the row lock is held
			err = fmt.Errorf("chunk %d changed under its row lock", step.Chunk)
		}
		return err
	}
	notDone, err := w.l.finishItems(ctx, w.tx, key, ends)
	if err == nil && len(notDone) > 0 { // cannot happen while the row locks are held
		err = fmt.Errorf("%d items changed under their row locks (first %q)", len(notDone), notDone[0])
	}
	return err
}
