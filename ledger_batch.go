package idem

import (
	"context"
	"database/sql/driver"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
)

// Batched writes. A group (ledger_group.go) runs each write in a savepoint
// of its own: three statements a write, each paying modernc's fixed cost
// of a statement (binding, stepping, resetting: most of a claim's time in
// a group). The two writes every Run makes, a new key's claim and a done
// mark without a cursor, can instead go with others of their kind in one
// statement: the writes of a group that come one after another, are of
// the same kind and name different keys (so that their order does not
// matter) run as one INSERT … SELECT FROM (VALUES …) or UPDATE … FROM
// (VALUES …), RETURNING the keys whose row it changed. A write whose row
// changed gets the answer its own statement would have given (hit); the
// others (a claim whose key has a record, a done mark whose lease was
// lost) get theirs as alone (miss: a claim's f then runs in its
// savepoint, deciding under the write lock; a done mark that changed no
// row changed nothing). Triggers fire for each row as for a row's own
// statement.
//
// The statement runs in a savepoint: if it fails, it is rolled back and
// every write of it runs alone, in its savepoint, so that a failure is
// its write's alone, as without batches; a failure that ended the
// transaction (a full disk) fails the group, as without batches.
//
// 16 goroutines doing fresh Runs: see BENCHMARKS.md.

// testHookBatch, when set (by tests), is called with the number of rows of
// each batched statement before it runs.
var testHookBatch atomic.Pointer[func(rows int)]

// batchKind is what a batchable write does.
type batchKind uint8

const (
	batchClaim batchKind = iota + 1 // claimInsertSQL of a key
	batchDone                       // finishExec without a cursor
)

// batchRow is a write's part of a batched statement.
type batchRow struct {
	kind batchKind
	key  Key
	// args returns the write's VALUES row (its times moved forward by its
	// wait for the lock: tx.at).
	args func(tx *wtx) []any
	// hit records the write's answer when the statement changed its row.
	hit func()
	// miss records it when the statement did not: it may run statements of
	// its own (a claim's f), in the write's savepoint.
	miss func(tx *wtx) error
}

// batchCols is how many values a row of each kind has.
var batchCols = [...]int{batchClaim: 6, batchDone: 9}

// maxBatch is the most writes one batched statement takes.
const maxBatch = 32

// batchSQLs holds each kind's statement for each number of rows.
var batchSQLs sync.Map // batchSQLKey -> string

type batchSQLKey struct {
	kind batchKind
	n    int
}

// batchSQL is kind's statement for n rows.
func batchSQL(kind batchKind, n int) string {
	k := batchSQLKey{kind, n}
	if q, ok := batchSQLs.Load(k); ok {
		return q.(string)
	}
	row := "(" + strings.TrimSuffix(strings.Repeat("?, ", batchCols[kind]), ", ") + ")"
	values := strings.TrimSuffix(strings.Repeat(row+", ", n), ", ")
	var q string
	switch kind {
	case batchClaim:
		// claimInsertSQL for each row: job, period, owner, lease_until,
		// now (created, updated, started), fingerprint.
		q = `INSERT INTO idem_runs(job, period, status, attempt, owner, lease_until, created, updated, started, fingerprint)
	SELECT v.column1, v.column2, 'running', 1, v.column3, v.column4, v.column5, v.column5, v.column5, v.column6
	FROM (VALUES ` + values + `) AS v
	WHERE NOT EXISTS (SELECT 1 FROM idem_jobs WHERE job = v.column1 AND horizon >= v.column2)
	ON CONFLICT DO NOTHING RETURNING job, period`
	case batchDone:
		// finishExec's UPDATE for each row: job, period, attempt, status,
		// failures, not_before, last_error, updated, value.
		q = `UPDATE idem_runs SET status = v.column4, failures = v.column5, not_before = v.column6,
		last_error = v.column7, lease_until = 0, updated = v.column8, value = v.column9
	FROM (VALUES ` + values + `) AS v
	WHERE idem_runs.job = v.column1 AND idem_runs.period = v.column2 AND idem_runs.attempt = v.column3
		AND idem_runs.status = 'running'
	RETURNING job, period`
	default:
		panic(fmt.Sprintf("idem: batch kind %d", kind))
	}
	batchSQLs.Store(k, q)
	return q
}

// runWrites runs batch's writes in the order they came: those that can go
// together in one statement (batchRun) do, the others each in a savepoint
// of its own (runSavepoints).
func (l *Ledger) runWrites(ctx context.Context, c *wconn, batch []*groupWrite) error {
	for len(batch) > 0 {
		n := batchRun(batch)
		var err error
		if n >= 2 {
			err = l.runBatch(ctx, c, batch[:n])
		} else {
			n = 1
			err = l.runSavepoints(ctx, c, batch[:1])
		}
		if err != nil {
			return err
		}
		batch = batch[n:]
	}
	return nil
}

// batchRun is how many writes at the head of batch can run as one
// statement: batchable, of one kind, naming different keys, at most
// maxBatch.
func batchRun(batch []*groupWrite) int {
	if batch[0].b == nil {
		return 0
	}
	kind := batch[0].b.kind
	n := 1
	for n < len(batch) && n < maxBatch {
		b := batch[n].b
		if b == nil || b.kind != kind {
			break
		}
		dup := false
		for _, x := range batch[:n] {
			if x.b.key == b.key {
				dup = true
				break
			}
		}
		if dup {
			break
		}
		n++
	}
	return n
}

// runBatch runs run (batchable writes of one kind, different keys) as one
// statement in a savepoint, and answers each (hit or miss). A write whose
// context has ended gets its error and is left out. If the statement
// fails, it is rolled back and each write runs alone (runSavepoints).
func (l *Ledger) runBatch(ctx context.Context, c *wconn, run []*groupWrite) error {
	live := make([]*groupWrite, 0, len(run))
	for _, x := range run {
		x.err = nil
		if err := context.Cause(x.ctx); err != nil && x.ctx.Err() != nil {
			x.err = err
			continue
		}
		live = append(live, x)
	}
	if len(live) < 2 {
		return l.runSavepoints(ctx, c, live)
	}
	kind := live[0].b.kind
	if hook := testHookBatch.Load(); hook != nil {
		(*hook)(len(live))
	}
	args := make([]any, 0, len(live)*batchCols[kind])
	for _, x := range live {
		args = append(args, x.b.args(l.groupWtx(c, x))...)
	}
	if _, err := c.exec(ctx, `SAVEPOINT idem_batch`); err != nil {
		return err
	}
	changed := make(map[Key]bool, len(live))
	err := c.query(ctx, batchSQL(kind, len(live)), args, func(vals []driver.Value) error {
		k, err := batchKey(vals)
		changed[k] = true
		return err
	})
	if err != nil {
		if _, rerr := c.exec(ctx, `ROLLBACK TO idem_batch`); rerr != nil {
			return rerr
		}
		if _, rerr := c.exec(ctx, `RELEASE idem_batch`); rerr != nil {
			return rerr
		}
		return l.runSavepoints(ctx, c, live)
	}
	if _, err := c.exec(ctx, `RELEASE idem_batch`); err != nil {
		return err
	}
	var misses []*groupWrite
	for _, x := range live {
		if changed[x.b.key] {
			x.b.hit()
		} else {
			misses = append(misses, x)
		}
	}
	// A miss may run statements (a claim that decides under the lock):
	// each in its savepoint, as without batches.
	return l.runSavepointsWith(ctx, c, misses, func(x *groupWrite, tx *wtx) error { return x.b.miss(tx) })
}

// batchKey is the key of a row a batched statement returned (job, period).
func batchKey(vals []driver.Value) (Key, error) {
	if len(vals) != 2 {
		return Key{}, fmt.Errorf("idem: a batched write returned %d columns, want 2", len(vals))
	}
	var k Key
	for i, dst := range []*string{&k.Job, &k.Period} {
		switch v := vals[i].(type) {
		case string:
			*dst = v
		case []byte:
			*dst = string(v)
		default:
			return Key{}, fmt.Errorf("idem: a batched write returned %T for a key", v)
		}
	}
	return k, nil
}
