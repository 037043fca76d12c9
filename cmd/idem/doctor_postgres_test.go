//go:build unix

package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"net/url"
	"os"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// pgAdmin returns a pool on the test database ($IDEM_TEST_PG_DSN, a role
// that may create roles: scripts/pg.sh's), closed when t ends, and its DSN;
// without one the test is skipped.
func pgAdmin(t *testing.T) (*pgxpool.Pool, string) {
	t.Helper()
	dsn := os.Getenv("IDEM_TEST_PG_DSN")
	if dsn == "" {
		t.Skip("no PostgreSQL: set IDEM_TEST_PG_DSN (eval \"$(scripts/pg.sh start)\" from the repository's root)")
	}
	pool, err := pgxpool.New(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool, dsn
}

func randomName(prefix string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

func schemaExistsIn(t *testing.T, pool *pgxpool.Pool, name string) bool {
	t.Helper()
	var ok bool
	if err := pool.QueryRow(context.Background(), `SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)`, name).Scan(&ok); err != nil {
		t.Fatal(err)
	}
	return ok
}

// TestDoctorPostgresRoleNamedLikeSchema: 'idem doctor --postgres' as a
// real role named like the ledger's schema, with PostgreSQL's default
// search_path, reports the search_path error (exit 1) before anything has
// created the schema, names the fix, and creates nothing; after the fix
// the check is ok.
func TestDoctorPostgresRoleNamedLikeSchema(t *testing.T) {
	t.Parallel()
	admin, dsn := pgAdmin(t)
	ctx := context.Background()
	name := randomName("idemdoc_")
	id := pgx.Identifier{name}.Sanitize()
	if _, err := admin.Exec(ctx, `CREATE ROLE `+id+` LOGIN`); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = admin.Exec(context.Background(), `DROP SCHEMA IF EXISTS `+id+` CASCADE`)
		if _, err := admin.Exec(context.Background(), `DROP ROLE `+id); err != nil {
			t.Errorf("drop role %s: %v", name, err)
		}
	})
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User(name)
	e := newEnv(t, "2026-10-28T02:00:00Z")
	out, _ := e.want(exitFailed, "doctor", "--postgres", u.String(), "--postgres-schema", name)
	line := findingIn(out, levelError, "search_path")
	for _, want := range []string{name, `"$user", public`, "ALTER ROLE " + name + " SET search_path = public", "refuse"} {
		if !strings.Contains(line, want) {
			t.Errorf("doctor's search_path error lacks %q:\n%s", want, out)
		}
	}
	if schemaExistsIn(t, admin, name) {
		t.Errorf("doctor created the schema %s", name)
	}
	out, _ = e.want(exitFailed, "doctor", "--json", "--postgres", u.String(), "--postgres-schema", name)
	var rep doctorReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("doctor --json: %v\n%s", err, out)
	}
	found := false
	for _, f := range rep.Findings {
		found = found || f.Check == "search_path" && f.Level == levelError
	}
	if rep.OK || !found {
		t.Errorf("doctor --json: %+v; want ok false and a search_path error", rep)
	}

	if _, err := admin.Exec(ctx, `ALTER ROLE `+id+` SET search_path = public`); err != nil {
		t.Fatal(err)
	}
	out, _ = e.want(exitOK, "doctor", "--postgres", u.String(), "--postgres-schema", name)
	if findingIn(out, levelOK, "search_path") == "" || !strings.Contains(findingIn(out, levelWarn, "schema"), "no ledger in schema "+name) {
		t.Errorf("doctor after ALTER ROLE ... SET search_path = public:\n%s", out)
	}
}

// TestDoctorPostgres: doctor on a Postgres ledger, before the ledger
// exists (a warning; nothing created) and after runs with an unknown
// period; a DSN that reaches no server is an error.
func TestDoctorPostgres(t *testing.T) {
	t.Parallel()
	admin, dsn := pgAdmin(t)
	schema := randomName("idemdoc_")
	t.Cleanup(func() {
		_, _ = admin.Exec(context.Background(), `DROP SCHEMA IF EXISTS `+pgx.Identifier{schema}.Sanitize()+` CASCADE`)
	})
	e := newEnv(t, "2026-10-28T02:00:00Z")
	out, _ := e.want(exitOK, "doctor", "--postgres", dsn, "--postgres-schema", schema)
	for _, want := range [][3]string{{levelOK, "connection", "PostgreSQL "}, {levelOK, "search_path", "does not reach"}, {levelWarn, "schema", "no ledger in schema " + schema}} {
		if !strings.Contains(findingIn(out, want[0], want[1]), want[2]) {
			t.Errorf("doctor before the first run lacks %q:\n%s", want, out)
		}
	}
	if schemaExistsIn(t, admin, schema) {
		t.Fatalf("doctor created the schema %s", schema)
	}

	e.pg = []string{"--postgres", dsn, "--postgres-schema", schema}
	e.want(exitOK, runArgs()...)
	e.want(exitUnknown, "run", "--job", "pay", "--tz", "UTC", "--mode", "at-most-once", "--", "false")
	out, _ = e.want(exitOK, "doctor", "--postgres", dsn, "--postgres-schema", schema)
	for _, want := range []string{"pgledger schema " + schema + ", version", "records of 2 jobs", "1 unknown", "idem resolve --postgres DSN --postgres-schema " + schema} {
		if !strings.Contains(out, want) {
			t.Errorf("doctor after the runs lacks %q:\n%s", want, out)
		}
	}
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "error") {
			t.Errorf("doctor on a good Postgres ledger: %s", line)
		}
	}

	out, _ = e.want(exitFailed, "doctor", "--postgres", "postgres://app@127.0.0.1:1/none?connect_timeout=5", "--postgres-schema", schema)
	if !strings.Contains(findingIn(out, levelError, "connection"), "cannot connect to 127.0.0.1:1/none") {
		t.Errorf("doctor on a server that is not there:\n%s", out)
	}
}

// findingIn returns the message of the first line of doctor's output with
// level and check, "" if there is none.
func findingIn(out, level, check string) string {
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) > 2 && f[0] == level && f[1] == check {
			return strings.Join(f[2:], " ")
		}
	}
	return ""
}

// TestServerSupported: the doctor refuses a server older than PostgreSQL 12.
func TestServerSupported(t *testing.T) {
	for num, want := range map[int]bool{110022: false, 119999: false, 120000: true, 150018: true, 180001: true} {
		if got := serverSupported(num); got != want {
			t.Errorf("serverSupported(%d) = %v, want %v", num, got, want)
		}
	}
}
