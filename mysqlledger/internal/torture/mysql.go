package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/idemgo/idem"
	"github.com/idemgo/idem/internal/torture/harness"
	"github.com/idemgo/idem/mysqlledger"
	"github.com/idemgo/idem/outbox"
)

// dsnEnv names the database when -mysql-dsn does not: the variable the
// mysqlledger tests use (scripts/mysql.sh starts a throwaway server and
// prints it).
const dsnEnv = "IDEM_TEST_MYSQL_DSN"

// myLoc is what every process of a run needs to reach its store: the
// parent's Prepare makes it, and the workers get it in their environment.
type myLoc struct {
	DSN    string `json:"dsn"`
	Prefix string `json:"prefix"`
}

func mysqlBackend() *harness.Backend {
	var dsnFlag string
	return &harness.Backend{
		Name:   "mysql",
		Tx:     true,
		Outbox: true,
		Flags: func(fs *flag.FlagSet) {
			fs.StringVar(&dsnFlag, "mysql-dsn", "", "-store mysql: the database, user@tcp(host:port)/db (default $"+dsnEnv+"); each run keeps its tables under a new prefix there")
		},
		Prepare: func(ctx context.Context, dir string) (string, string, error) {
			dsn := dsnFlag
			if dsn == "" {
				dsn = os.Getenv(dsnEnv)
			}
			if dsn == "" {
				return "", "", harness.UsageError(fmt.Errorf("-store mysql needs a database: -mysql-dsn or $%s (scripts/mysql.sh starts a throwaway one)", dsnEnv))
			}
			cfg, err := mysql.ParseDSN(dsn)
			if err != nil {
				return "", "", harness.UsageError(fmt.Errorf("-mysql-dsn: %w", err))
			}
			var b [4]byte
			_, _ = rand.Read(b[:])
			loc := myLoc{DSN: dsn, Prefix: "tt" + time.Now().UTC().Format("0102t150405") + "_" + hex.EncodeToString(b[:]) + "_"}
			// Create the ledger now (a server that does not flush each
			// commit is refused before any worker starts): the workers
			// then find it.
			h, err := openMySQL(ctx, loc)
			if err != nil {
				return "", "", err
			}
			_ = h.Close()
			// For a kept directory: which prefix holds its store.
			if err := os.WriteFile(filepath.Join(dir, "mysql-prefix.txt"), []byte(loc.Prefix+"\n"), 0o644); err != nil {
				return "", "", err
			}
			j, err := json.Marshal(loc)
			if err != nil {
				return "", "", err
			}
			return string(j), fmt.Sprintf("mysql database %s on %s, tables %s* (a *sql.DB per worker process)", cfg.DBName, cfg.Addr, loc.Prefix), nil
		},
		Open: func(ctx context.Context, dir, locJSON string) (*harness.Handle, error) {
			var loc myLoc
			if err := json.Unmarshal([]byte(locJSON), &loc); err != nil || loc.Prefix == "" {
				return nil, fmt.Errorf("bad mysql locator %q: %v", locJSON, err)
			}
			return openMySQL(ctx, loc)
		},
		Cleanup: func(ctx context.Context, locJSON string) error {
			var loc myLoc
			if err := json.Unmarshal([]byte(locJSON), &loc); err != nil {
				return err
			}
			db, err := sql.Open("mysql", loc.DSN)
			if err != nil {
				return err
			}
			defer db.Close()
			rows, err := db.QueryContext(ctx, `SELECT table_name FROM information_schema.tables
				WHERE table_schema = DATABASE() AND table_name LIKE ?`, strings.ReplaceAll(loc.Prefix, "_", `\_`)+"%")
			if err != nil {
				return err
			}
			var names []string
			for rows.Next() {
				var n string
				if err := rows.Scan(&n); err != nil {
					rows.Close()
					return err
				}
				names = append(names, "`"+n+"`")
			}
			rows.Close()
			if err := rows.Err(); err != nil || len(names) == 0 {
				return err
			}
			_, err = db.ExecContext(ctx, `DROP TABLE IF EXISTS `+strings.Join(names, ", "))
			return err
		},
	}
}

// openWait is how long a worker waits for the server when it opens its
// ledger: a run may crash and restart the server (crash recovery takes a
// few seconds).
const openWait = time.Minute

// openMySQL opens a worker's ledger on a *sql.DB of its own, waiting
// openWait at most for a server that is down or recovering.
func openMySQL(ctx context.Context, loc myLoc) (*harness.Handle, error) {
	deadline := time.Now().Add(openWait)
	for {
		db, err := sql.Open("mysql", loc.DSN)
		if err != nil {
			return nil, err
		}
		l, err := mysqlledger.New(ctx, db, mysqlledger.WithTablePrefix(loc.Prefix))
		if err == nil {
			return &harness.Handle{Store: l, Close: db.Close, Tx: myTx{l: l}, Outbox: myOutbox{l: l}}, nil
		}
		db.Close()
		if errors.Is(err, mysqlledger.ErrWeakDurability) || errors.Is(err, idem.ErrNewerSchema) || time.Now().After(deadline) {
			return nil, err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// myTx is the tx mode on the MySQL ledger: the effect is a row of a table
// beside the ledger's, written through RunTx's *sql.Tx.
type myTx struct{ l *mysqlledger.Ledger }

func (m myTx) table() string { return m.l.Table("effects") }

func (m myTx) Setup(ctx context.Context) error {
	_, err := m.l.DB().ExecContext(ctx, `CREATE TABLE IF NOT EXISTS `+m.table()+` (k VARBINARY(255) NOT NULL PRIMARY KEY, n INT NOT NULL) ENGINE=InnoDB`)
	return err
}

func (m myTx) RunTx(ctx context.Context, key idem.Key, fn func(context.Context, func(context.Context) error) error, opts ...idem.Option) error {
	// NOT idempotent on purpose, so that a second application shows as n = 2.
	bump := `INSERT INTO ` + m.table() + ` (k, n) VALUES (?, 1) ON DUPLICATE KEY UPDATE n = n + 1`
	return m.l.RunTx(ctx, key, func(ctx context.Context, tx *sql.Tx) error {
		return fn(ctx, func(ctx context.Context) error {
			_, err := tx.ExecContext(ctx, bump, key.String())
			return err
		})
	}, opts...)
}

func (m myTx) Counts(ctx context.Context) (map[string]int, error) {
	rows, err := m.l.DB().QueryContext(ctx, `SELECT k, n FROM `+m.table())
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	c := map[string]int{}
	for rows.Next() {
		var k string
		var n int
		if err := rows.Scan(&k, &n); err != nil {
			return nil, err
		}
		c[k] = n
	}
	return c, rows.Err()
}

// myOutbox is the outbox mode on the MySQL ledger: the business row is in
// a table beside the ledger's and the messages in its outbox, both written
// through RunTx's *sql.Tx.
type myOutbox struct{ l *mysqlledger.Ledger }

func (m myOutbox) table() string { return m.l.Table("outbox_effects") }

func (m myOutbox) Setup(ctx context.Context) error {
	_, err := m.l.DB().ExecContext(ctx, `CREATE TABLE IF NOT EXISTS `+m.table()+` (k VARBINARY(255) NOT NULL PRIMARY KEY, n INT NOT NULL,
		nonce VARBINARY(255) NOT NULL) ENGINE=InnoDB`)
	return err
}

func (m myOutbox) RunTx(ctx context.Context, key idem.Key, fn func(context.Context, harness.OutboxTx) error, opts ...idem.Option) error {
	// NOT idempotent on purpose, so that a second application shows as n = 2.
	bump := `INSERT INTO ` + m.table() + ` (k, n, nonce) VALUES (?, 1, ?) ON DUPLICATE KEY UPDATE n = n + 1, nonce = VALUES(nonce)`
	return m.l.RunTx(ctx, key, func(ctx context.Context, tx *sql.Tx) error {
		return fn(ctx, myAttempt{key: key, bump: bump, tx: tx})
	}, opts...)
}

// myAttempt is harness.OutboxTx on RunTx's *sql.Tx.
type myAttempt struct {
	key  idem.Key
	bump string
	tx   *sql.Tx
}

func (a myAttempt) Bump(ctx context.Context, nonce string) error {
	_, err := a.tx.ExecContext(ctx, a.bump, a.key.String(), nonce)
	return err
}

func (a myAttempt) Put(ctx context.Context, msg outbox.Message) (string, error) {
	return outbox.Put(ctx, a.tx, msg)
}

func (m myOutbox) Rows(ctx context.Context) (map[string]harness.Row, error) {
	rows, err := m.l.DB().QueryContext(ctx, `SELECT k, n, nonce FROM `+m.table())
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	r := map[string]harness.Row{}
	for rows.Next() {
		var k string
		var row harness.Row
		if err := rows.Scan(&k, &row.N, &row.Nonce); err != nil {
			return nil, err
		}
		r[k] = row
	}
	return r, rows.Err()
}

func (m myOutbox) Store() harness.OutboxStore { return m.l }
