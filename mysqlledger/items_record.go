package mysqlledger

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"database/sql/driver"
	"encoding/hex"
	"strings"
	"time"

	"github.com/idemgo/idem/idemstore"
)

var (
	_ idemstore.ItemRecorder    = (*Ledger)(nil)
	_ idemstore.ItemRecordTurns = (*Ledger)(nil)
)

// RecordItems implements [idemstore.ItemRecorder]: AddItems of each of
// chunks in turn, in one transaction, under the lock of the period's row
// in itemsets. Each chunk is checked against the items recorded before, as
// AddItems does (the interface allows leaving that to SealItems; doing it
// here keeps CountItems exact).
func (l *Ledger) RecordItems(ctx context.Context, key idemstore.Key, chunks [][]string) error {
	if err := l.recordItems(ctx, l.db, key, chunks, false, false); err != nil {
		return opErr("record items", key, err)
	}
	return nil
}

// recordItems is RecordItems, and with seal SealItems, in one transaction.
// With fast (the chunks' items all differ: a turn's) and seal, if the
// period has no chunk the chunks are written without their items' rows in
// item_set, which only a set sealed in the same transaction may do: no
// caller adds to it after.
func (l *Ledger) recordItems(ctx context.Context, b beginner, key idemstore.Key, chunks [][]string, seal, fast bool) error {
	if !seal && !anyItems(chunks) {
		return nil
	}
	return inTxOn(ctx, b, func(tx *sql.Tx) error {
		if seal && fast {
			// A period with no row in itemsets has no chunk (its chunks
			// are written, and pruned, with its row): the row is created
			// sealed, locked until the commit, and the chunks written
			// with it, without reading first.
			res, err := tx.ExecContext(ctx, `INSERT IGNORE INTO `+l.t.itemsets+` (job, period, sealed) VALUES (?, ?, 1)`, key.Job, key.Period)
			if err != nil {
				return err
			}
			if n, err := res.RowsAffected(); err != nil {
				return err
			} else if n == 1 {
				return l.insertChunks(ctx, tx, key, 1, turnLists(chunks))
			}
		}
		if sealed, err := l.lockItemSet(ctx, tx, key); err != nil || sealed {
			return err
		}
		if seal && fast {
			var last int64
			if err := tx.QueryRowContext(ctx, `SELECT COALESCE(MAX(chunk), 0) FROM `+l.t.itemChunks+` WHERE job = ? AND period = ?`,
				key.Job, key.Period).Scan(&last); err != nil {
				return err
			}
			if last == 0 {
				if err := l.insertChunks(ctx, tx, key, 1, turnLists(chunks)); err != nil {
					return err
				}
				return l.sealTx(ctx, tx, key, true)
			}
		}
		for _, c := range chunks {
			if len(c) == 0 {
				continue
			}
			if err := l.addItemsTx(ctx, tx, key, c); err != nil {
				return err
			}
		}
		return l.sealTx(ctx, tx, key, seal)
	})
}

// turnLists is a turn's chunks cut into item lists (cutList).
func turnLists(chunks [][]string) [][]string {
	var lists [][]string
	for _, c := range chunks {
		lists = append(lists, cutList(c)...)
	}
	return lists
}

func anyItems(chunks [][]string) bool {
	for _, c := range chunks {
		if len(c) > 0 {
			return true
		}
	}
	return false
}

// turnItems and turnBytes bound what a turn keeps in memory until its
// Seal: past either, it records what it holds as RecordItems does, and the
// rest of the set too.
const (
	turnItems = 100_000
	turnBytes = 8 << 20
)

// RecordTurn implements [idemstore.ItemRecordTurns]. The turn is a named
// lock of the server's (GET_LOCK, one per ledger, database and period),
// taken on a connection of the pool that the turn holds until Seal or
// Release; the wait for it is at most wait (in whole seconds, at least
// one). A wait that ends first returns a turn not held, which records as
// RecordItems and SealItems do. The server gives the lock back when the
// holder's connection ends: a recorder whose process died hands the turn
// on at once.
//
// The lock is all the turn holds while the caller generates its items:
// when the period has no chunk as the turn is taken, the turn keeps the
// chunks it is given in memory (each item once, at its first place), and
// Seal writes them and seals the set in one transaction, under the lock
// of the period's itemsets row: if the period still has no chunk, the
// chunks are written without a row per item in item_set (no caller can add
// to a sealed set, so nothing needs them); if another caller recorded
// beside the turn meanwhile (its wait for the turn ended, or a release
// without turns), they are recorded as AddItems records them, against the
// items recorded before. The set is never seen unsealed. A set larger than
// turnItems items or turnBytes bytes, or a period that had chunks when the
// turn was taken, is recorded as RecordItems records it, as it comes.
func (l *Ledger) RecordTurn(ctx context.Context, key idemstore.Key, wait time.Duration) (idemstore.ItemTurn, error) {
	if err := key.Validate(); err != nil {
		return nil, err
	}
	conn, err := l.db.Conn(ctx)
	if err != nil {
		return nil, opErr("record items: turn", key, err)
	}
	name := l.turnName(key)
	secs := int64(max(1, (wait+time.Second-1)/time.Second))
	var got sql.NullInt64
	if err := conn.QueryRowContext(ctx, `SELECT GET_LOCK(?, ?)`, name, secs).Scan(&got); err != nil {
		discard(conn) // whether the lock was taken is not known: the session ends
		return nil, opErr("record items: turn", key, err)
	}
	if !got.Valid || got.Int64 != 1 {
		conn.Close()
		return &recordTurn{l: l, key: key}, nil // the wait ended
	}
	r := &recordTurn{l: l, key: key, conn: conn, name: name}
	// A set sealed already (by the turn before, most often) gives the
	// lock back in the same statement: the callers that waited for the
	// recorder hand the turn on one round trip each, not two.
	var sealed, chunks int
	var released sql.NullInt64
	err = conn.QueryRowContext(ctx, `SELECT s.sealed, s.chunks, IF(s.sealed = 1, RELEASE_LOCK(?), NULL) FROM (SELECT
		COALESCE((SELECT sealed FROM `+l.t.itemsets+` WHERE job = ? AND period = ?), 0) AS sealed,
		(SELECT COUNT(*) FROM `+l.t.itemChunks+` WHERE job = ? AND period = ?) AS chunks) AS s`,
		name, key.Job, key.Period, key.Job, key.Period).Scan(&sealed, &chunks, &released)
	if err == nil && sealed == 1 && released.Valid && released.Int64 == 1 {
		conn.Close()
		return &recordTurn{l: l, key: key, sealed: true}, nil
	}
	if err != nil || sealed == 1 {
		r.Release() // a lock not given back ends the session
		if err != nil {
			return nil, opErr("record items: turn", key, err)
		}
		return &recordTurn{l: l, key: key, sealed: true}, nil
	}
	if chunks == 0 {
		r.seen = map[string]struct{}{}
	}
	return r, nil
}

// turnName is the name of the named lock of key's turn: at most 64
// characters, the database (see lockName), the ledger's prefix and the
// key in it.
func (l *Ledger) turnName(key idemstore.Key) string {
	h := sha256.Sum256([]byte(l.dbName + "\x00" + l.prefix + "\x00" + key.Job + "\x00" + key.Period))
	return "idem/mysqlledger/turn/" + hex.EncodeToString(h[:16])
}

// discard closes conn and keeps the pool from using it again: its session
// may hold a lock the turn could not give back.
func discard(conn *sql.Conn) {
	_ = conn.Raw(func(any) error { return driver.ErrBadConn })
	conn.Close()
}

// recordTurn is a turn of RecordTurn: conn holds the named lock name; nil
// when the wait for it ended first, when the set was sealed, or once the
// turn has ended.
type recordTurn struct {
	l      *Ledger
	key    idemstore.Key
	conn   *sql.Conn
	name   string
	sealed bool
	// seen, while the turn keeps its chunks in memory (nil otherwise): the
	// items of held, the chunks given so far, each item once; size, their
	// bytes.
	seen map[string]struct{}
	held [][]string
	size int
}

func (r *recordTurn) Sealed() bool { return r.sealed }

// on is where the turn's transactions run: on the connection that holds
// the turn (a pool of one connection is enough for one caller), or on the
// pool when the turn is not held.
func (r *recordTurn) on() beginner {
	if r.conn != nil {
		return r.conn
	}
	return r.l.db
}

func (r *recordTurn) RecordItems(ctx context.Context, chunks [][]string) error {
	if r.hold(chunks) {
		return nil
	}
	err := r.l.recordItems(ctx, r.on(), r.key, r.held, false, false)
	r.held = nil
	if err != nil {
		return opErr("record items", r.key, err)
	}
	return nil
}

// hold adds chunks to held and reports whether the turn keeps them in
// memory until its Seal: without the items held before, up to turnItems
// items and turnBytes bytes. Otherwise held is to be recorded now.
func (r *recordTurn) hold(chunks [][]string) bool {
	if r.seen == nil {
		r.held = append(r.held, chunks...)
		return false
	}
	for _, c := range chunks {
		fresh := make([]string, 0, len(c))
		for _, it := range c {
			if _, dup := r.seen[it]; !dup {
				r.seen[it] = struct{}{}
				r.size += len(it) + 1
				fresh = append(fresh, it)
			}
		}
		if len(fresh) > 0 {
			r.held = append(r.held, fresh)
		}
	}
	if len(r.seen) > turnItems || r.size > turnBytes {
		r.seen = nil // from here on, as RecordItems records
		return false
	}
	return true
}

func (r *recordTurn) Seal(ctx context.Context, last [][]string) error {
	if r.sealed {
		return nil
	}
	defer r.Release()
	fast := r.hold(last)
	if err := r.l.recordItems(ctx, r.on(), r.key, r.held, true, fast); err != nil {
		return opErr("seal items", r.key, err)
	}
	r.sealed = true
	return nil
}

// Release gives the turn's lock back, and its connection to the pool (a
// connection whose lock could not be given back is closed).
func (r *recordTurn) Release() {
	if r.conn == nil {
		return
	}
	var released sql.NullInt64
	if err := r.conn.QueryRowContext(context.Background(), `SELECT RELEASE_LOCK(?)`, r.name).Scan(&released); err != nil || released.Int64 != 1 {
		discard(r.conn)
	} else {
		r.conn.Close()
	}
	r.conn, r.seen, r.held = nil, nil, nil
}

// insertChunks inserts lists as new chunks numbered from first, several
// rows a statement (each statement's item lists within listBytes).
func (l *Ledger) insertChunks(ctx context.Context, tx *sql.Tx, key idemstore.Key, first int64, lists [][]string) error {
	for len(lists) > 0 {
		n, size := 0, 0
		for n < len(lists) && n < addBatch {
			s := 0
			for _, it := range lists[n] {
				s += len(it) + 1
			}
			if n > 0 && size+s > listBytes {
				break
			}
			size += s
			n++
		}
		rows, lrows := make([]string, n), make([]string, n)
		args, largs := make([]any, 0, 4*n), make([]any, 0, 4*n)
		for i, c := range lists[:n] {
			chunk := first + int64(i)
			rows[i] = `(?, ?, ?, ?, 0, 0, 0, 'pending', 0, 0, '', 0, ` + nowSQL + `)`
			args = append(args, key.Job, key.Period, chunk, len(c))
			lrows[i] = `(?, ?, ?, ?)`
			largs = append(largs, key.Job, key.Period, chunk, []byte(strings.Join(c, "\n")))
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO `+l.t.itemChunks+` (job, period, chunk, n, settled, started, doubt, status, attempt,
			failures, owner, lease_until, updated) VALUES `+strings.Join(rows, ", "), args...); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO `+l.t.itemLists+` (job, period, chunk, items) VALUES `+strings.Join(lrows, ", "), largs...); err != nil {
			return err
		}
		first += int64(n)
		lists = lists[n:]
	}
	return nil
}

// sealTx seals the period's set in tx, if seal.
func (l *Ledger) sealTx(ctx context.Context, tx *sql.Tx, key idemstore.Key, seal bool) error {
	if !seal {
		return nil
	}
	_, err := tx.ExecContext(ctx, `UPDATE `+l.t.itemsets+` SET sealed = 1 WHERE job = ? AND period = ?`, key.Job, key.Period)
	return err
}
