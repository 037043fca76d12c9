package idem

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// ErrNotLedger: the database is another application's, not an idem ledger
// (OpenLedger found tables of its own and no idem_meta), or a table with a
// name of idem's (idem_runs, ...) has another shape. Nothing was written to
// it.
var ErrNotLedger = errors.New("idem: not an idem ledger")

// ErrLedgerReplaced: the ledger's file was deleted or replaced by another
// file while the Ledger was open. The Ledger refuses to go on rather than
// create a new, empty ledger (which would run every period again) or write
// into a file that no path names any more. Close it and open the file now
// at the path, or restore the old one.
var ErrLedgerReplaced = errors.New("idem: ledger file deleted or replaced while open")

// ledgerDSN is the URI of the ledger file at abs with the given query.
// mode=rw (set by OpenLedger once the file exists) makes SQLite fail instead
// of creating a missing file.
func ledgerDSN(abs string, q url.Values) string {
	u := url.URL{Scheme: "file", Path: abs}
	return "file:" + u.EscapedPath() + "?" + q.Encode()
}

// createLedgerFile creates an empty ledger file at path if there is none
// (SQLite takes an empty file for an empty database), so that every
// connection can then be opened with mode=rw. It reports a directory that
// cannot be written clearly.
func createLedgerFile(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if errors.Is(err, os.ErrExist) {
		return nil // another process created it meanwhile
	}
	if err != nil {
		if msg := unwritable(path); msg != "" {
			return fmt.Errorf("idem: ledger %s: cannot create it: %s: %w", path, msg, err)
		}
		return fmt.Errorf("idem: ledger %s: cannot create it: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("idem: ledger %s: %w", path, err)
	}
	return syncDir(filepath.Dir(path))
}

// ledgerConnector opens the connections of an owned ledger, each time
// checking that the path still names the file the ledger opened: a
// connection opened after the file was deleted would create a new, empty
// ledger, and one opened after it was replaced would use another file.
type ledgerConnector struct {
	driver.Connector
	path string
	id   os.FileInfo
}

func (c *ledgerConnector) Connect(ctx context.Context) (driver.Conn, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	conn, err := c.Connector.Connect(ctx)
	if err != nil {
		if cerr := c.check(); cerr != nil { // mode=rw refused to create it
			return nil, cerr
		}
		return nil, err
	}
	// SQLite opened the file by its path after the first check: check again.
	if err := c.check(); err != nil {
		conn.Close()
		return nil, err
	}
	// SQLite opens a file it cannot open for writing read-only instead,
	// whatever the reason (too many open files, say); every write would
	// then fail with "attempt to write a readonly database".
	if ro, ok := conn.(interface{ IsReadOnly(string) (bool, error) }); ok {
		if r, err := ro.IsReadOnly("main"); err == nil && r {
			conn.Close()
			return nil, readOnlyOpen(c.path)
		}
	}
	return conn, nil
}

// readOnlyOpen is the error of a connection to the ledger at path that
// SQLite could open only read-only.
func readOnlyOpen(path string) error {
	err := errors.New("SQLite could open it only read-only")
	if d := diagnose(path, "open", err); d != nil {
		return fmt.Errorf("cannot open it for writing: %w", d)
	}
	return fmt.Errorf("cannot open it for writing: %w, though it is writable now: opening it for writing failed a moment ago (too many open files is the usual cause)", err)
}

// check reports whether the path still names the ledger's file (always
// so for an attached ledger: c is nil).
func (c *ledgerConnector) check() error {
	if c == nil {
		return nil
	}
	fi, err := os.Stat(c.path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("%w: ledger %s was deleted while open; refusing to create a new, empty one (close the Ledger; restore the file, or open it anew to start an empty ledger)", ErrLedgerReplaced, c.path)
	case err != nil:
		return nil // let SQLite report it
	case !os.SameFile(fi, c.id):
		return fmt.Errorf("%w: ledger %s was replaced by another file while open (close the Ledger and open it again to use the new file)", ErrLedgerReplaced, c.path)
	}
	return nil
}

// openOwned opens the pool of an owned ledger file with PRAGMA
// synchronous=sync.
func openOwned(abs string, id os.FileInfo, sync string) (*sql.DB, error) {
	q := url.Values{}
	q.Add("_pragma", "busy_timeout(10000)")
	q.Add("_pragma", "synchronous("+sync+")")
	q.Add("_txlock", "immediate")
	q.Add("mode", "rw")
	base, err := sqlite.NewConnector(ledgerDSN(abs, q))
	if err != nil {
		return nil, fmt.Errorf("idem: ledger %s: %w", abs, err)
	}
	return sql.OpenDB(&ledgerConnector{Connector: base, path: abs, id: id}), nil
}

// ledgerTables lists idem's tables and the columns every version of idem
// has given them (later versions only add columns, by migrations). A table
// of that name without these columns is another application's.
var ledgerTables = map[string][]string{
	"idem_meta":        {"name", "value"},
	"idem_runs":        {"job", "period", "status", "attempt", "failures", "owner", "lease_until", "not_before", "last_error", "created", "updated"},
	"idem_jobs":        {"job", "cursor", "horizon"},
	"idem_items":       {"job", "period", "item", "status", "attempt", "failures", "doubt", "owner", "lease_until", "not_before", "last_error", "updated"}, // version 2
	"idem_itemsets":    {"job", "period", "sealed"},
	"idem_item_set":    {"job", "period", "item"},
	"idem_item_chunks": {"job", "period", "chunk", "n", "status", "attempt", "failures", "owner", "lease_until", "settled", "started", "doubt", "updated"},
	"idem_item_lists":  {"job", "period", "chunk", "items"},
	"idem_item_state":  {"job", "period", "item", "chunk", "status", "attempt", "failures", "doubt", "owner", "lease_until", "not_before", "last_error", "updated"},
	"idem_outbox":      {"seq", "id", "topic", "payload", "headers", "job", "period", "item", "status", "attempts", "token", "owner", "lease_until", "not_before", "last_error", "created", "delivered"}, // version 5
	"idem_job_counts":  {"job", "status", "n", "updated"},                                                                                                                                                // version 8
}

type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

func queryStrings(ctx context.Context, q querier, query string, args ...any) ([]string, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, rows.Err()
}

// userTables lists the database's tables, without SQLite's own.
func userTables(ctx context.Context, q querier) ([]string, error) {
	return queryStrings(ctx, q, `SELECT name FROM sqlite_master WHERE type='table' AND name NOT LIKE 'sqlite\_%' ESCAPE '\' ORDER BY name`)
}

// checkTableShapes refuses a database whose tables named like idem's lack
// the columns idem has always given them: the application's own idem_runs,
// say. It only reads.
func checkTableShapes(ctx context.Context, q querier, where string) error {
	tables, err := userTables(ctx, q)
	if err != nil {
		return err
	}
	for _, t := range tables {
		want, ok := ledgerTables[t]
		if !ok {
			continue
		}
		cols, err := queryStrings(ctx, q, `SELECT name FROM pragma_table_info(?)`, t)
		if err != nil {
			return err
		}
		var missing []string
		for _, c := range want {
			if !slices.Contains(cols, c) {
				missing = append(missing, c)
			}
		}
		if len(missing) > 0 {
			return fmt.Errorf("%w: %s: its table %s is not idem's: it has the columns (%s) and lacks (%s); nothing was written. Rename that table, or give idem a database of its own",
				ErrNotLedger, where, t, strings.Join(cols, ", "), strings.Join(missing, ", "))
		}
	}
	return nil
}

// checkForeign refuses an existing, non-empty SQLite file that is not an
// idem ledger: one with tables of its own and no idem_meta. It reads the
// file through a read-only connection that creates no -wal or -shm file
// where none exists, so the file is left exactly as it was.
func checkForeign(path string, walMode bool) error {
	q := url.Values{}
	q.Add("_pragma", "busy_timeout(10000)") // another process may be creating the ledger
	if _, err := os.Stat(path + "-wal"); walMode && errors.Is(err, os.ErrNotExist) {
		// The last writer closed it: the file holds everything, and
		// immutable=1 reads it without creating -wal and -shm files.
		q.Add("immutable", "1")
	} else {
		q.Add("mode", "ro")
	}
	db, err := sql.Open("sqlite", ledgerDSN(path, q))
	if err != nil {
		return fmt.Errorf("idem: ledger %s: %w", path, err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	ctx := context.Background()
	tables, err := userTables(ctx, db)
	if err != nil {
		return fmt.Errorf("idem: ledger %s: reading its tables: %w", path, err)
	}
	var foreign []string
	for _, t := range tables {
		if t == "idem_meta" {
			return nil
		}
		if _, ok := ledgerTables[t]; !ok {
			foreign = append(foreign, t)
		}
	}
	if len(foreign) > 0 {
		const show = 5
		list := strings.Join(foreign[:min(show, len(foreign))], ", ")
		if len(foreign) > show {
			list += fmt.Sprintf(" and %d more", len(foreign)-show)
		}
		return fmt.Errorf("%w: ledger %s is another application's SQLite database (tables %s), left untouched; to keep idem's tables in your application's database, attach to it with idem.NewLedger",
			ErrNotLedger, path, list)
	}
	return checkTableShapes(ctx, db, "ledger "+path)
}

// sqliteFileHeader reads the header of an existing SQLite file: whether it
// is one, and whether it is in WAL mode (file format versions 2).
func sqliteFileHeader(path string) (isSQLite, walMode bool, err error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return false, false, err
	}
	defer f.Close()
	head := make([]byte, 100)
	if _, err := io.ReadFull(f, head); err != nil {
		return false, false, nil
	}
	if string(head[:len(sqliteHeader)]) != string(sqliteHeader) {
		return false, false, nil
	}
	return true, head[18] == 2 && head[19] == 2, nil
}

// unwritable says why the ledger at path cannot be written, as far as the
// file system tells (a read-only mount, permissions, an immutable file or
// directory), or "" if it finds nothing wrong.
func unwritable(path string) string {
	msg, _ := unwritableCause(path)
	return msg
}

// unwritableCause is unwritable with the error access(2) gave (EROFS,
// EACCES, EPERM), 0 if none.
func unwritableCause(path string) (string, syscall.Errno) {
	base, dir := filepath.Base(path), filepath.Dir(path)
	if err := checkWritable(dir); err != nil {
		return fmt.Sprintf("the directory %s is read-only or not writable by this process (%v); SQLite must create %s-wal and %s-shm in it", dir, err, base, base), errnoOf(err)
	}
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		if err := checkWritable(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Sprintf("%s is read-only or not writable by this process (%v)", p, err), errnoOf(err)
		}
	}
	return "", 0
}

// errnoOf returns the syscall.Errno in err's chain, or 0.
func errnoOf(err error) syscall.Errno {
	var errno syscall.Errno
	errors.As(err, &errno)
	return errno
}

// wOK is access(2)'s W_OK.
const wOK = 2

// unwritableDir says why this process cannot create files in dir (a
// read-only mount, permissions, an immutable directory: access(2) sees
// them all, for root too), or "" if it can.
func unwritableDir(dir string) string {
	if err := checkWritable(dir); err != nil {
		return fmt.Sprintf("the directory %s is read-only or not writable by this process (%v)", dir, err)
	}
	return ""
}

// isUnwritableErr reports SQLite's errors for a file or directory it cannot
// open or write.
func isUnwritableErr(err error) bool {
	if err == nil {
		return false
	}
	var se *sqlite.Error
	if errors.As(err, &se) {
		switch se.Code() & 0xff {
		case sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_READONLY, sqlite3.SQLITE_PERM, sqlite3.SQLITE_IOERR:
			return true
		}
	}
	return false
}

// writeErr explains a write that failed: one that failed on the disk
// breaks the handle (diskFailure); one that could not open or write the
// ledger's files says why, as far as the file system tells; other errors
// are returned as they are.
func (l *Ledger) writeErr(err error) error {
	switch {
	case err == nil:
		return nil
	case isDiskFailure(sqliteCode(err)):
		return l.diskFailure(err)
	case l.path == "" || !isUnwritableErr(err):
		return err
	}
	if d := diagnose(l.path, "write", err); d != nil {
		return fmt.Errorf("cannot write: %w", d)
	}
	return err
}
