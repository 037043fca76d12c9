package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemstore"
	"github.com/idemgo/idem/mysqlledger"
	"github.com/idemgo/idem/pgledger"
	"github.com/idemgo/idem/redisstore"
	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/logging"
	"github.com/spf13/cobra"
)

// EnvPostgres is the environment variable that names the Postgres ledger's
// DSN when --postgres is not given.
const EnvPostgres = "IDEM_POSTGRES"

// EnvMySQL is the environment variable that names the MySQL (or MariaDB)
// ledger's DSN (user:password@tcp(host:port)/db) when --mysql is not
// given.
const EnvMySQL = "IDEM_MYSQL"

// EnvRedis is the environment variable that names the Redis store's
// server (host:port or a redis:// URL) when --redis is not given.
const EnvRedis = "IDEM_REDIS"

// EnvNow fixes idem's clock to an RFC 3339 instant. It is for tests only:
// it lets a test move "now" forward by days without waiting. Leases,
// backoffs, due periods and prune cut-offs all use it; the command itself
// still runs in real time.
const EnvNow = "IDEM_NOW"

// EnvClock set to "skip", with $IDEM_NOW, makes the waits between
// attempts (the backoff before an in-process retry) move idem's clock
// forward instead of sleeping. It is for tests only: a test can then follow
// a run's retries over minutes of idem's time without waiting. While an
// attempt holds its period (the command runs) the clock stands still and
// the lease is renewed in real time, as without it.
const EnvClock = "IDEM_CLOCK"

// fixedClock is an idem.Clock whose Now is fixed ($IDEM_NOW); waits are real.
type fixedClock struct{ now time.Time }

func (c fixedClock) Now() time.Time                         { return c.now }
func (c fixedClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// skipClock is the clock of $IDEM_NOW with $IDEM_CLOCK=skip: Now starts at
// $IDEM_NOW; a wait made while no attempt holds a period (between attempts)
// moves Now forward by its length and returns at once; a wait made while an
// attempt holds one (the heartbeat's, while the command runs) is real, and
// Now stands still. The detached store tells it when an attempt starts and
// ends: the heartbeat starts after the claim and has stopped before the
// attempt's end is recorded, so it never moves the clock.
type skipClock struct {
	mu      sync.Mutex
	now     time.Time
	holding bool // an attempt holds its period
}

func (c *skipClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *skipClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.holding {
		return time.After(d)
	}
	c.now = c.now.Add(max(d, 0))
	ch := make(chan time.Time, 1)
	ch <- c.now
	return ch
}

// attemptStarted and attemptEnded mark the span in which an attempt holds
// its period. Both may be called on a nil clock.
func (c *skipClock) attemptStarted() { c.setHolding(true) }
func (c *skipClock) attemptEnded()   { c.setHolding(false) }

func (c *skipClock) setHolding(h bool) {
	if c == nil {
		return
	}
	c.mu.Lock()
	c.holding = h
	c.mu.Unlock()
}

// clock returns the clock idem uses: the system clock, or the fixed one of
// $IDEM_NOW, or with $IDEM_CLOCK=skip as well the skipping one (tests only).
func clock() (idem.Clock, error) {
	v, mode := os.Getenv(EnvNow), os.Getenv(EnvClock)
	switch {
	case mode != "" && mode != "skip":
		return nil, usageError(fmt.Errorf("$%s=%q: the only value is skip (tests only)", EnvClock, mode))
	case mode != "" && v == "":
		return nil, usageError(fmt.Errorf("$%s=%s needs $%s (tests only)", EnvClock, mode, EnvNow))
	case v == "":
		return idem.SystemClock(), nil
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return nil, usageError(fmt.Errorf("$%s=%q: want an RFC 3339 time like 2026-10-28T02:00:00Z: %w", EnvNow, v, err))
	}
	if mode == "skip" {
		return &skipClock{now: t}, nil
	}
	return fixedClock{now: t}, nil
}

// ledger is an open store and how to close it.
type ledger struct {
	store idemstore.CatchUpStore
	desc  string // for messages: the file's path or "postgres"
	close func()
	locks cmdLocks // where idem run keeps its periods' command locks
}

// target is where the ledger is: a SQLite file, a Postgres DSN or a Redis
// server.
type target struct {
	path  string
	dsn   string
	redis string // host:port or a redis:// (rediss://) URL
	mysql string // a DSN of github.com/go-sql-driver/mysql
}

// ledgerTarget resolves --ledger, --postgres, --redis, --mysql,
// $IDEM_POSTGRES, $IDEM_REDIS, $IDEM_MYSQL, $IDEM_LEDGER and the default path, in that order (two of
// the variables set at once, with no flag, is an error).
func ledgerTarget(cmd *cobra.Command) (target, error) {
	path, _ := cmd.Flags().GetString("ledger")
	dsn, _ := cmd.Flags().GetString("postgres")
	addr, _ := cmd.Flags().GetString("redis")
	my, _ := cmd.Flags().GetString("mysql")
	switch {
	case path != "":
		return target{path: path}, nil
	case dsn != "":
		return target{dsn: dsn}, nil
	case addr != "":
		return target{redis: addr}, nil
	case my != "":
		return target{mysql: my}, nil
	}
	var set []string
	for _, v := range []string{EnvPostgres, EnvRedis, EnvMySQL, idem.EnvLedger} {
		if os.Getenv(v) != "" {
			set = append(set, "$"+v)
		}
	}
	if len(set) > 1 {
		return target{}, usageError(fmt.Errorf("%s are all set: unset all but one, or pass --ledger, --postgres, --redis or --mysql", strings.Join(set, " and ")))
	}
	if dsn := os.Getenv(EnvPostgres); dsn != "" {
		return target{dsn: dsn}, nil
	}
	if addr := os.Getenv(EnvRedis); addr != "" {
		return target{redis: addr}, nil
	}
	if dsn := os.Getenv(EnvMySQL); dsn != "" {
		return target{mysql: dsn}, nil
	}
	p, err := idem.DefaultLedgerPath()
	if err != nil {
		return target{}, usageError(err)
	}
	return target{path: p}, nil
}

// openLedger opens the ledger the flags name. create allows creating a new
// SQLite file (and its directory); without it a missing file is an error,
// so that a mistyped --ledger does not silently show an empty ledger.
func openLedger(ctx context.Context, cmd *cobra.Command, clk idem.Clock, create bool) (*ledger, error) {
	t, err := ledgerTarget(cmd)
	if err != nil {
		return nil, err
	}
	if t.dsn != "" {
		schema, _ := cmd.Flags().GetString("postgres-schema")
		opts := []pgledger.Option{pgledger.WithSchema(schema), pgledger.WithRunOptions(idem.WithClock(clk))}
		if weak, _ := cmd.Flags().GetBool("postgres-allow-weak-durability"); weak {
			opts = append(opts, pgledger.AllowWeakDurability())
		}
		pl, err := pgledger.Open(ctx, t.dsn, opts...)
		if err != nil {
			hint := ""
			if errors.Is(err, pgledger.ErrWeakDurability) {
				hint = " (the option is --postgres-allow-weak-durability here)"
			}
			return nil, usageError(fmt.Errorf("postgres ledger: %w%s", err, hint))
		}
		cc := pl.Pool().Config().ConnConfig
		locks := postgresLocks(fmt.Sprintf("%s:%d/%s", cc.Host, cc.Port, cc.Database), pl.Schema())
		return &ledger{store: pl, desc: "postgres ledger (schema " + pl.Schema() + ")", close: pl.Close, locks: locks}, nil
	}
	if t.redis != "" {
		return openRedis(ctx, cmd, t.redis, clk)
	}
	if t.mysql != "" {
		return openMySQL(ctx, cmd, t.mysql, clk)
	}
	if create {
		if err := os.MkdirAll(filepath.Dir(t.path), 0o755); err != nil {
			return nil, usageError(fmt.Errorf("ledger %s: %w", t.path, err))
		}
	} else if _, err := os.Stat(t.path); errors.Is(err, os.ErrNotExist) {
		return nil, usageError(fmt.Errorf("no ledger at %s (nothing has run with it yet; pass --ledger, or set $%s)", t.path, idem.EnvLedger))
	}
	l, err := idem.OpenLedger(t.path, idem.WithClock(clk))
	if err != nil {
		return nil, usageError(err)
	}
	st, err := idemstore.Of(l)
	if err != nil {
		l.Close()
		return nil, err
	}
	return &ledger{store: st.(idemstore.CatchUpStore), desc: "ledger " + l.Path(), close: func() { l.Close() }, locks: sqliteLocks(l.Path())}, nil
}

// openRedis opens the Redis store on the server at addr (host:port, or a
// redis:// or rediss:// URL, which may carry the password and database).
func openRedis(ctx context.Context, cmd *cobra.Command, addr string, clk idem.Clock) (*ledger, error) {
	url := addr
	if !strings.Contains(addr, "://") {
		url = "redis://" + addr
	}
	prefix, _ := cmd.Flags().GetString("redis-prefix")
	opts := []redisstore.Option{redisstore.WithPrefix(prefix), redisstore.WithRunOptions(idem.WithClock(clk))}
	if weak, _ := cmd.Flags().GetBool("redis-allow-weak-durability"); weak {
		opts = append(opts, redisstore.AllowWeakDurability())
	}
	// go-redis logs to stderr on its own (a closed port: eight lines of
	// dial errors before Open returns its error); what failed is idem's to
	// say, once.
	logging.Disable()
	s, err := redisstore.Open(ctx, url, opts...)
	if err != nil {
		hint := ""
		if errors.Is(err, redisstore.ErrWeakDurability) {
			hint = " (the option is --redis-allow-weak-durability here)"
		}
		return nil, usageError(fmt.Errorf("redis store: %w%s", err, hint))
	}
	o := s.Client().(*redis.Client).Options()
	where := fmt.Sprintf("%s/%d", o.Addr, o.DB)
	return &ledger{store: s, desc: fmt.Sprintf("redis store (prefix %s on %s)", s.Prefix(), where),
		close: func() { _ = s.Close() }, locks: sharedLocks("redis", where+"\x00"+s.Prefix())}, nil
}

// openMySQL opens the MySQL (or MariaDB) ledger at dsn, a DSN of
// github.com/go-sql-driver/mysql that selects a database. Unless the DSN
// says otherwise, statements go with their arguments in one round trip
// (interpolateParams=true), and idle connections are closed after a minute
// (before the server's wait_timeout does).
func openMySQL(ctx context.Context, cmd *cobra.Command, dsn string, clk idem.Clock) (*ledger, error) {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return nil, usageError(fmt.Errorf("mysql ledger: --mysql %w", err))
	}
	if !strings.Contains(dsn, "interpolateParams=") {
		cfg.InterpolateParams = true
	}
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, usageError(fmt.Errorf("mysql ledger: %w", err))
	}
	db := sql.OpenDB(conn)
	db.SetConnMaxIdleTime(time.Minute)
	prefix, _ := cmd.Flags().GetString("mysql-prefix")
	opts := []mysqlledger.Option{mysqlledger.WithTablePrefix(prefix), mysqlledger.WithRunOptions(idem.WithClock(clk))}
	if weak, _ := cmd.Flags().GetBool("mysql-allow-weak-durability"); weak {
		opts = append(opts, mysqlledger.AllowWeakDurability())
	}
	ml, err := mysqlledger.New(ctx, db, opts...)
	if err != nil {
		db.Close()
		hint := ""
		if errors.Is(err, mysqlledger.ErrWeakDurability) {
			hint = " (the option is --mysql-allow-weak-durability here)"
		}
		return nil, usageError(fmt.Errorf("mysql ledger: %w%s", err, hint))
	}
	where := fmt.Sprintf("%s(%s)/%s", cfg.Net, cfg.Addr, cfg.DBName)
	return &ledger{store: ml, desc: fmt.Sprintf("mysql ledger (prefix %s on %s)", ml.Prefix(), where),
		close: func() { db.Close() }, locks: sharedLocks("mysql", where+"\x00"+ml.Prefix())}, nil
}

// openForOps opens an existing ledger for ls, show, resolve, reset, prune.
func openForOps(cmd *cobra.Command) (*ledger, idem.Clock, error) {
	clk, err := clock()
	if err != nil {
		return nil, nil, err
	}
	l, err := openLedger(cmd.Context(), cmd, clk, false)
	if err != nil {
		return nil, nil, err
	}
	return l, clk, nil
}
