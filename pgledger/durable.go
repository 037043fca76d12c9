package pgledger

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// ErrWeakDurability: the PostgreSQL server does not make a commit durable
// before it acknowledges it, whatever a session sets: it runs with fsync
// off. [New], [Open] and [NewDB] refuse it unless [AllowWeakDurability] is
// given. The error's text names the setting. (synchronous_commit off, as
// the server's, the database's or the role's default, is no reason to
// refuse: every transaction that writes to the ledger commits with it on;
// see the package's documentation.)
var ErrWeakDurability = errors.New("pgledger: postgres server does not make commits durable")

// AllowWeakDurability lets [New], [Open] and [NewDB] accept a server that
// runs with fsync off. The ledger then works as usual, but a crash of the
// server's host (power loss, a kernel crash; not a crash of PostgreSQL
// alone) can lose any commit the server acknowledged since its last
// checkpoint, or leave its data files corrupted. A lost done mark makes its
// key run again (every mode); a lost claim (the pending mark of AtMostOnce
// and TwoPhase) lets the key run again without the doubt that would have
// stopped AtMostOnce or made TwoPhase check the downstream: the effect can
// then happen twice. It is [redisstore.AllowWeakDurability]'s twin.
//
// [redisstore.AllowWeakDurability]: https://pkg.go.dev/github.com/idemgo/idem/redisstore#AllowWeakDurability
func AllowWeakDurability() Option { return func(c *config) { c.weak = true } }

// checkDurability refuses a server that runs with fsync off, unless weak.
// The check is made once, when the ledger is attached: a server
// reconfigured later is not noticed.
func checkDurability(ctx context.Context, q conn, schema string, weak bool) error {
	var fsync string
	if err := q.queryRow(ctx, `SELECT pg_catalog.current_setting('fsync')`, nil, &fsync); err != nil {
		return fmt.Errorf("pgledger: schema %q: reading the server's fsync setting: %w", schema, err)
	}
	if fsync == "on" || weak {
		return nil
	}
	return fmt.Errorf("%w: it runs with fsync %s: a done mark or claim it acknowledged could be lost in a crash of its host. "+
		"Set fsync = on (postgresql.conf, or ALTER SYSTEM SET fsync = on and a reload), or pass pgledger.AllowWeakDurability() to accept the loss",
		ErrWeakDurability, fsync)
}

// Every transaction that writes to the ledger's tables commits durably,
// whatever synchronous_commit the server, the database or the role sets
// by default, and whatever the session set since (a RunTx's fn, a pool's
// AfterConnect): a trigger on each of the ledger's tables, BEFORE each
// statement that writes, raises synchronous_commit from off to on for the
// rest of the statement's transaction (set_config with is_local), so its
// COMMIT waits for its WAL flush. It costs no round trip, and it holds for
// every client of the schema alike: a pgx pool, a *sql.DB, the idem
// command, an older pgledger's process.
//
// The ledger's own transactions that need not survive power loss on their
// own (AtLeastOnce claims, AddItems, an Each's open; see the syncOff
// statements) set synchronous_commit off deliberately, and with it
// idem.async_commit, which the trigger leaves alone: their WAL is flushed
// by the next durable commit, which a done mark is.
//
// A value stronger than off (local, remote_write, on, remote_apply) is
// left as it is: on waits for the synchronous standbys the server names,
// as every other durable commit on it does.
const (
	durableFuncSQL = `CREATE OR REPLACE FUNCTION {s}.durable_commit() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF pg_catalog.current_setting('synchronous_commit') = 'off'
		AND pg_catalog.current_setting('idem.async_commit', true) IS DISTINCT FROM 'on' THEN
		PERFORM pg_catalog.set_config('synchronous_commit', 'on', true);
	END IF;
	RETURN NULL;
END
$$`
	durableTriggerSQL = `DROP TRIGGER IF EXISTS durable_commit ON {s}.{t};
CREATE TRIGGER durable_commit BEFORE INSERT OR UPDATE OR DELETE ON {s}.{t}
	FOR EACH STATEMENT EXECUTE FUNCTION {s}.durable_commit()`
)

// ledgerTables are the tables of the ledger's schema, each of which gets
// the trigger durable_commit.
var ledgerTables = []string{"meta", "runs", "jobs", "item_set", "item_chunks", "item_lists", "item_state", "itemsets",
	"outbox", "limit_rates", "limit_slots"}

// durableDDL creates the function and the triggers of durable commits
// (schema version 7); {s} is the schema.
func durableDDL() string {
	stmts := []string{durableFuncSQL}
	for _, t := range ledgerTables {
		stmts = append(stmts, strings.ReplaceAll(durableTriggerSQL, "{t}", t))
	}
	return strings.Join(stmts, ";\n")
}
