package pgledger

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemstore"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// planLedger opens a ledger in a fresh schema, dropped when t ends, for a
// plan test.
func planLedger(t *testing.T) (*Ledger, *pgxpool.Pool, string) {
	t.Helper()
	dsn := os.Getenv("IDEM_TEST_PG_DSN")
	if dsn == "" {
		if v := os.Getenv("CI"); v != "" && v != "false" && v != "0" {
			t.Fatal("IDEM_TEST_PG_DSN is not set, and CI must run the Postgres tests")
		}
		t.Skip("no PostgreSQL: set IDEM_TEST_PG_DSN (scripts/test.sh starts one)")
	}
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	var b [6]byte
	_, _ = rand.Read(b[:])
	schema := "idemtest_plan_" + hex.EncodeToString(b[:])
	s := pgx.Identifier{schema}.Sanitize()
	t.Cleanup(func() { pool.Exec(context.Background(), `DROP SCHEMA IF EXISTS `+s+` CASCADE`) })
	l, err := New(ctx, pool, WithSchema(schema))
	if err != nil {
		t.Fatal(err)
	}
	return l, pool, s
}

// planScans runs query under EXPLAIN ANALYZE with plan_cache_mode mode, in
// a transaction that is rolled back, and returns its scans in plan order
// ("Index Scan <index>", "Tid Scan "). It fails t if an index scan read more
// than maxRows rows.
func planScans(t *testing.T, pool *pgxpool.Pool, mode string, maxRows int64, query string, args ...any) (string, []byte) {
	t.Helper()
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `SET LOCAL plan_cache_mode = `+mode); err != nil {
		t.Fatal(err)
	}
	var out []byte
	if err := tx.QueryRow(ctx, `EXPLAIN (ANALYZE, FORMAT JSON) `+query, args...).Scan(&out); err != nil {
		t.Fatal(err)
	}
	var plan []struct{ Plan planNode }
	if err := json.Unmarshal(out, &plan); err != nil {
		t.Fatal(err)
	}
	var scans []string
	var walk func(n planNode)
	walk = func(n planNode) {
		if strings.Contains(n.Type, "Scan") && !strings.HasPrefix(n.Type, "Subquery") {
			scans = append(scans, n.Type+" "+n.Index)
			if n.Type == "Index Scan" && n.Rows > maxRows {
				t.Errorf("%s on %s read %d rows, want at most %d", n.Type, n.Index, n.Rows, maxRows)
			}
		}
		for _, c := range n.Plans {
			walk(c)
		}
	}
	walk(plan[0].Plan)
	return strings.Join(scans, ", "), out
}

// TestClaimItemsPlan checks the single-item claim's plan on a 100k-item
// period: every status branch is one range of item_state_by_status, and the
// rows are updated through a TID scan; nothing scans the period. Twice: for
// a period the statistics know (90 % done), and for a new one they do not,
// where a lookup by key could turn into a scan of the period.
func TestClaimItemsPlan(t *testing.T) {
	t.Parallel()
	l, pool, s := planLedger(t)
	ctx := context.Background()
	fill := func(period string) {
		t.Helper()
		_, err := pool.Exec(ctx, `INSERT INTO `+s+`.item_state (job, period, item, status, not_before, lease_until)
			SELECT 'j', $1, 'acct-' || lpad(g::text, 6, '0'),
				CASE WHEN g < 90000 THEN 'done' WHEN g < 90100 THEN 'failed' WHEN g < 90200 THEN 'running'
					WHEN g < 90300 THEN 'unknown' ELSE 'pending' END,
				clock_timestamp() - interval '1 second', clock_timestamp() - interval '1 second'
			FROM generate_series(0, 99999) AS g`, period)
		if err != nil {
			t.Fatal(err)
		}
	}
	fill("known")
	if _, err := pool.Exec(ctx, `VACUUM ANALYZE `+s+`.item_state`); err != nil {
		t.Fatal(err)
	}
	fill("new") // not in the statistics
	for _, period := range []string{"known", "new"} {
		for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
			t.Run(period+"/"+mode, func(t *testing.T) {
				got, out := planScans(t, pool, mode, 200, l.q.claimItems, "j", period, "o", micros(idem.DefaultLease), int64(100), true, []string{},
					idemstore.NoteDied, idemstore.NoteExpired)
				want := strings.Repeat("Index Scan item_state_by_status, ", 5) + "Tid Scan "
				if got != want {
					t.Errorf("scans: %s\nwant:  %s\nplan: %s", got, want, out)
				}
			})
		}
	}
}

// TestClaimChunkPlan checks the chunk claim's plan on periods of 5000
// chunks, most of them done: the pending, the expired and the gone-owner
// branch are each one range of item_chunks_by_status, read up to the first
// runnable chunk,
// the chunk is updated through a TID scan, and its item list read by its
// key. For periods that have a pending chunk and for periods whose runnable
// chunks are all expired; known to the statistics or not.
func TestClaimChunkPlan(t *testing.T) {
	t.Parallel()
	l, pool, s := planLedger(t)
	ctx := context.Background()
	fill := func(period string, pending bool) {
		t.Helper()
		// Chunks 1 to 4900 are done; the rest run (or, with pending, 4951
		// on wait), and every other running chunk's lease has expired.
		_, err := pool.Exec(ctx, `INSERT INTO `+s+`.item_chunks (job, period, chunk, n, status, lease_until)
			SELECT 'j', $1, g, 10,
				CASE WHEN g <= 4900 THEN 'done' WHEN g <= 4950 OR NOT $2 THEN 'running' ELSE 'pending' END,
				clock_timestamp() + CASE WHEN g % 2 = 0 THEN interval '1 hour' ELSE interval '-1 second' END
			FROM generate_series(1, 5000) AS g`, period, pending)
		if err != nil {
			t.Fatal(err)
		}
		_, err = pool.Exec(ctx, `INSERT INTO `+s+`.item_lists (job, period, chunk, items)
			SELECT 'j', $1, g, ARRAY['a', 'b', 'c', 'd', 'e', 'f', 'g', 'h', 'i', 'j'] FROM generate_series(1, 5000) AS g`, period)
		if err != nil {
			t.Fatal(err)
		}
	}
	fill("known-pending", true)
	fill("known-expired", false)
	if _, err := pool.Exec(ctx, `VACUUM ANALYZE `+s+`.item_chunks, `+s+`.item_lists`); err != nil {
		t.Fatal(err)
	}
	fill("new-pending", true) // not in the statistics
	fill("new-expired", false)
	for _, period := range []string{"known-pending", "known-expired", "new-pending", "new-expired"} {
		for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
			t.Run(period+"/"+mode, func(t *testing.T) {
				got, out := planScans(t, pool, mode, 2, l.q.claimChunk, "j", period, "o", micros(idem.DefaultLease), 100, []string{})
				// The chunk's three ranges, its row, its items; then, for a
				// claim that took none, the probe for single items and the
				// owners of running work (not run here).
				want := "Index Scan item_chunks_by_status, Index Scan item_chunks_by_status, Index Scan item_chunks_by_status, Tid Scan , Index Scan item_lists_pkey, " +
					"Index Only Scan item_state_by_status, Index Scan item_chunks_by_status, Index Scan item_state_by_status, CTE Scan "
				if got != want {
					t.Errorf("scans: %s\nwant:  %s\nplan: %s", got, want, out)
				}
			})
		}
	}
}

type planNode struct {
	Type  string     `json:"Node Type"`
	Index string     `json:"Index Name"`
	Rows  int64      `json:"Actual Rows"`
	Plans []planNode `json:"Plans"`
}

// TestCountItemsPlan checks the count's generic plan (CountItems runs it
// so on a pgx pool) on a table of ten periods of 10,000 item records and
// 200 chunks each: it reads the one period's rows by index, never the
// table.
func TestCountItemsPlan(t *testing.T) {
	t.Parallel()
	l, pool, s := planLedger(t)
	ctx := context.Background()
	_, err := pool.Exec(ctx, `INSERT INTO `+s+`.item_state (job, period, item, status)
		SELECT 'j', 'p' || p, 'acct-' || lpad(g::text, 6, '0'), CASE WHEN g % 10 = 0 THEN 'failed' ELSE 'done' END
		FROM generate_series(0, 9) AS p, generate_series(0, 9999) AS g`)
	if err != nil {
		t.Fatal(err)
	}
	_, err = pool.Exec(ctx, `INSERT INTO `+s+`.item_chunks (job, period, chunk, n, status)
		SELECT 'j', 'p' || p, g, 500, 'done' FROM generate_series(0, 9) AS p, generate_series(1, 200) AS g`)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `VACUUM ANALYZE `+s+`.item_state, `+s+`.item_chunks`); err != nil {
		t.Fatal(err)
	}
	got, out := planScans(t, pool, "force_generic_plan", 10000, l.q.countItems, "j", "p3")
	if strings.Contains(got, "Seq Scan") || !strings.Contains(got, "item_state") || !strings.Contains(got, "item_chunks") {
		t.Errorf("scans: %s; want the period's rows read by index\nplan: %s", got, out)
	}
}

// outboxRowsRead runs the outbox claim of req under EXPLAIN (ANALYZE,
// FORMAT JSON) with plan_cache_mode mode, in a transaction that is rolled
// back, and returns the rows its scans of table outbox read (the rows
// each returned and each filtered out, times its loops: a count of the
// plan's work, not a time), the rows it claimed, and its scans.
func outboxRowsRead(t *testing.T, l *Ledger, pool *pgxpool.Pool, mode string, req idemstore.OutboxClaimRequest) (read, claimed int64, scans string, plan []byte) {
	t.Helper()
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `SET LOCAL plan_cache_mode = `+mode); err != nil {
		t.Fatal(err)
	}
	if err := tx.QueryRow(ctx, `EXPLAIN (ANALYZE, FORMAT JSON) `+l.oq(outboxClaimSQL), claimArgs(req)...).Scan(&plan); err != nil {
		t.Fatal(err)
	}
	type node struct {
		Type      string  `json:"Node Type"`
		Relation  string  `json:"Relation Name"`
		Index     string  `json:"Index Name"`
		Rows      float64 `json:"Actual Rows"`
		Loops     float64 `json:"Actual Loops"`
		Filtered  float64 `json:"Rows Removed by Filter"`
		Rechecked float64 `json:"Rows Removed by Index Recheck"`
		Plans     []node  `json:"Plans"`
	}
	var top []struct{ Plan node }
	if err := json.Unmarshal(plan, &top); err != nil {
		t.Fatal(err)
	}
	var list []string
	var walk func(n node)
	walk = func(n node) {
		if n.Relation == "outbox" && strings.Contains(n.Type, "Scan") {
			read += int64((n.Rows + n.Filtered + n.Rechecked) * n.Loops)
			list = append(list, strings.TrimSpace(n.Type+" "+n.Index))
		}
		for _, c := range n.Plans {
			walk(c)
		}
	}
	walk(top[0].Plan)
	return read, int64(top[0].Plan.Rows), strings.Join(list, ", "), plan
}

// TestClaimOutboxPlan checks that an outbox claim reads the topics' heads
// and what follows them, not the backlog: on 20,000 pending messages of 4
// topics (interleaved; or all but three of one topic, the other three's
// heads last), with every head due or every head leased, a claim of 32
// with runs of 32 (as a relay makes it) reads at most 1,000 rows, through
// outbox_pending and TID scans only, and takes as many messages as the
// topics' order allows. The rows read are the plan's own count (EXPLAIN
// ANALYZE), not a time. With the statistics known and not, with custom
// and generic plans.
func TestClaimOutboxPlan(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const backlog, maxRead = 20_000, 1_000
	const want = "Index Scan outbox_pending, Index Scan outbox_pending, Tid Scan, Index Scan outbox_pending, Tid Scan, Tid Scan"
	layouts := []struct {
		name  string
		fill  string // $1: the number of messages
		lease bool   // each topic's head leased
		want  int64  // messages claimed
	}{
		{"interleaved", `SELECT g, 't' || (g % 4) FROM generate_series(0, $1 - 1) AS g`, false, 32},
		{"one topic first", `SELECT g, CASE WHEN g < $1 - 3 THEN 't0' ELSE 't' || ($1 - g) END FROM generate_series(0, $1 - 1) AS g`, false, 32},
		{"heads leased", `SELECT g, 't' || (g % 4) FROM generate_series(0, $1 - 1) AS g`, true, 0},
	}
	for _, lay := range layouts {
		t.Run(lay.name, func(t *testing.T) {
			t.Parallel()
			l, pool, s := planLedger(t)
			_, err := pool.Exec(ctx, `INSERT INTO `+s+`.outbox (id, topic, payload, job, period, created)
				SELECT 'm' || g, topic, '\x00', 'j', 'p' || g, 1 FROM (`+lay.fill+`) AS m(g, topic) ORDER BY g`, backlog)
			if err != nil {
				t.Fatal(err)
			}
			now := time.Now()
			if lay.lease {
				_, err := pool.Exec(ctx, `UPDATE `+s+`.outbox SET lease_until = $1 WHERE seq IN (SELECT min(seq) FROM `+s+`.outbox GROUP BY topic)`,
					now.Add(time.Hour).UnixMicro())
				if err != nil {
					t.Fatal(err)
				}
			}
			req := idemstore.OutboxClaimRequest{N: 32, Run: 32, Owner: "r", Now: now, Lease: time.Minute}
			for _, stats := range []string{"unknown", "known"} {
				if stats == "known" {
					if _, err := pool.Exec(ctx, `VACUUM ANALYZE `+s+`.outbox`); err != nil {
						t.Fatal(err)
					}
				}
				for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
					read, claimed, scans, plan := outboxRowsRead(t, l, pool, mode, req)
					t.Logf("statistics %s, %s: read %d rows, claimed %d; %s", stats, mode, read, claimed, scans)
					if read > maxRead || claimed != lay.want || scans != want {
						t.Errorf("statistics %s, %s: the claim read %d rows of the outbox (want at most %d) and claimed %d (want %d)\nscans: %s\nwant:  %s\nplan: %s",
							stats, mode, read, maxRead, claimed, lay.want, scans, want, plan)
					}
				}
			}
		})
	}
}
