//go:build unix

package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/idemgo/idem/internal/testwait"

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

// ownPGServer starts a throwaway PostgreSQL server for t alone
// (scripts/pg.sh start), stopped when t ends, and returns its DSN: a test
// that changes the server's configuration must not do so under the other
// tests. It is skipped as pgAdmin is.
func ownPGServer(t *testing.T) string {
	t.Helper()
	pgAdmin(t)
	script := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("../../scripts/pg.sh", args...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		cmd.WaitDelay = time.Second
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		if err := testwait.Process(cmd, 2*time.Minute); err != nil {
			t.Fatalf("scripts/pg.sh %s: %v\n%s%s", strings.Join(args, " "), err, &stdout, &stderr)
		}
		return stdout.String()
	}
	s := strings.TrimSpace(script("start"))
	dsn := strings.TrimSuffix(strings.TrimPrefix(s, "export IDEM_TEST_PG_DSN='"), "'")
	if dsn == s || !strings.HasPrefix(dsn, "postgres://") {
		t.Fatalf("scripts/pg.sh start printed %q, not an export of IDEM_TEST_PG_DSN", s)
	}
	t.Cleanup(func() { script("stop", dsn) })
	return dsn
}

// findingsIn returns the messages of out's findings of level and check, one
// a line.
func findingsIn(out, level, check string) string {
	var b strings.Builder
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) > 2 && f[0] == level && f[1] == check {
			b.WriteString(strings.Join(f[2:], " ") + "\n")
		}
	}
	return b.String()
}

// TestPostgresWeakDurability: on a server with fsync and full_page_writes
// off, and synchronous_commit off for the role, 'idem run --postgres'
// refuses the server naming fsync and the flag that accepts it, and runs
// with --postgres-allow-weak-durability; doctor reports fsync off as an
// error (a warning with the flag), full_page_writes off as a warning, and
// the role's synchronous_commit off as raised by the ledger's commits.
func TestPostgresWeakDurability(t *testing.T) {
	t.Parallel()
	dsn := ownPGServer(t)
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	for _, s := range []string{`ALTER SYSTEM SET fsync = off`, `ALTER SYSTEM SET full_page_writes = off`,
		`ALTER ROLE app SET synchronous_commit = off`, `SELECT pg_reload_conf()`} {
		if _, err := pool.Exec(ctx, s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
	testwait.Until(t, func() bool {
		var fsync, fpw string
		return pool.QueryRow(ctx, `SELECT current_setting('fsync'), current_setting('full_page_writes')`).Scan(&fsync, &fpw) == nil && fsync == "off" && fpw == "off"
	}, "the server to run with fsync and full_page_writes off")

	e := newEnv(t, "2026-10-28T02:00:00Z")
	out, _ := e.want(exitFailed, "doctor", "--postgres", dsn)
	if f := findingsIn(out, levelError, "durability"); !strings.Contains(f, "fsync off") || !strings.Contains(f, "--postgres-allow-weak-durability") {
		t.Errorf("doctor on a server with fsync off: no durability error naming fsync off and --postgres-allow-weak-durability:\n%s", out)
	}
	if f := findingsIn(out, levelWarn, "durability"); !strings.Contains(f, "full_page_writes off") {
		t.Errorf("doctor on a server with full_page_writes off: no durability warning naming it:\n%s", out)
	}

	e.pg = []string{"--postgres", dsn}
	_, stderr := e.want(exitUsage, runArgs()...)
	for _, want := range []string{"fsync off", "--postgres-allow-weak-durability"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("idem run on a server with fsync off: stderr lacks %q:\n%s", want, stderr)
		}
	}
	e.pg = []string{"--postgres", dsn, "--postgres-allow-weak-durability"}
	e.want(exitOK, runArgs()...)

	out, _ = e.want(exitOK, "doctor", "--postgres", dsn, "--postgres-allow-weak-durability")
	if f := findingsIn(out, levelWarn, "durability"); !strings.Contains(f, "fsync off") || !strings.Contains(f, "accepted") {
		t.Errorf("doctor --postgres-allow-weak-durability on a server with fsync off: no durability warning naming it:\n%s", out)
	}
	if f := findingsIn(out, levelOK, "durability"); !strings.Contains(f, "synchronous_commit is off") || !strings.Contains(f, "raise it to on") {
		t.Errorf("doctor with synchronous_commit off for the role: no finding that the ledger raises it:\n%s", out)
	}
}
