package pgledger

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/idemgo/idem"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// TestClaimItemsPlan checks the claim's plan on a 100k-item period: every
// status branch is one range of items_by_status, and the rows are updated
// through a TID scan; nothing scans the period. Twice: for a period the
// statistics know (90 % done), and for a new one they do not, where a
// lookup by key could turn into a scan of the period.
func TestClaimItemsPlan(t *testing.T) {
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
	defer pool.Close()
	var b [6]byte
	_, _ = rand.Read(b[:])
	schema := "idemtest_plan_" + hex.EncodeToString(b[:])
	s := pgx.Identifier{schema}.Sanitize()
	defer pool.Exec(context.Background(), `DROP SCHEMA IF EXISTS `+s+` CASCADE`)
	l, err := New(ctx, pool, WithSchema(schema))
	if err != nil {
		t.Fatal(err)
	}
	fill := func(period string) {
		t.Helper()
		_, err := pool.Exec(ctx, `INSERT INTO `+s+`.items (job, period, item, status, not_before, lease_until)
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
	if _, err := pool.Exec(ctx, `VACUUM ANALYZE `+s+`.items`); err != nil {
		t.Fatal(err)
	}
	fill("new") // not in the statistics
	for _, period := range []string{"known", "new"} {
		for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
			t.Run(period+"/"+mode, func(t *testing.T) {
				tx, err := pool.Begin(ctx)
				if err != nil {
					t.Fatal(err)
				}
				defer tx.Rollback(ctx)
				if _, err := tx.Exec(ctx, `SET LOCAL plan_cache_mode = `+mode); err != nil {
					t.Fatal(err)
				}
				var out []byte
				err = tx.QueryRow(ctx, `EXPLAIN (ANALYZE, FORMAT JSON) `+l.q.claimItems,
					"j", period, "o", micros(idem.DefaultLease), int64(100), true).Scan(&out)
				if err != nil {
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
						if n.Type == "Index Scan" && n.Rows > 200 {
							t.Errorf("%s on %s read %d rows for a claim of 100", n.Type, n.Index, n.Rows)
						}
					}
					for _, c := range n.Plans {
						walk(c)
					}
				}
				walk(plan[0].Plan)
				got := strings.Join(scans, ", ")
				want := strings.Repeat("Index Scan items_by_status, ", 4) + "Tid Scan "
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
