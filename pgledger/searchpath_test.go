package pgledger_test

import (
	"context"
	"database/sql"
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/idemgo/idem/pgledger"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// newRole creates a login role named name on the test server, allowed to
// create schemas in the test database and tables in public, and returns
// the test DSN with that role as its user; the role and what it owns are
// dropped when t ends.
func newRole(t *testing.T, pool *pgxpool.Pool, name string) string {
	t.Helper()
	ctx := context.Background()
	id := pgx.Identifier{name}.Sanitize()
	var dbName string
	if err := pool.QueryRow(ctx, `SELECT current_database()`).Scan(&dbName); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`CREATE ROLE ` + id + ` LOGIN`,
		`GRANT CREATE ON DATABASE ` + pgx.Identifier{dbName}.Sanitize() + ` TO ` + id,
		`GRANT CREATE ON SCHEMA public TO ` + id,
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	t.Cleanup(func() {
		for _, q := range []string{`DROP OWNED BY ` + id + ` CASCADE`, `DROP ROLE ` + id} {
			if _, err := pool.Exec(context.Background(), q); err != nil {
				t.Errorf("%s: %v", q, err)
			}
		}
	})
	u, err := url.Parse(testDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User(name)
	return u.String()
}

// schemaOf returns the schema of the table name in the test database, ""
// if there is none.
func schemaOf(t *testing.T, pool *pgxpool.Pool, name string) string {
	t.Helper()
	var s string
	err := pool.QueryRow(context.Background(), `SELECT string_agg(table_schema, ',') FROM information_schema.tables WHERE table_name = $1`, name).Scan(&s)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		t.Fatal(err)
	}
	return s
}

func schemaExists(t *testing.T, pool *pgxpool.Pool, name string) bool {
	t.Helper()
	var ok bool
	if err := pool.QueryRow(context.Background(), `SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)`, name).Scan(&ok); err != nil {
		t.Fatal(err)
	}
	return ok
}

// TestRoleNamedLikeSchema: connected as a real role named like the
// ledger's schema, with PostgreSQL's default search_path ("$user",
// public), New, NewDB (pgx's stdlib) and CheckSearchPath refuse with
// ErrSchemaOnSearchPath and create nothing. Accepted with
// AllowSchemaOnSearchPath, the schema does capture the application's
// unqualified CREATE TABLE (what the refusal prevents); once the role's
// search_path is public, New accepts and the application's table goes to
// public.
func TestRoleNamedLikeSchema(t *testing.T) {
	t.Parallel()
	admin := newPool(t)
	ctx := context.Background()
	name := uniqueName("idemrole_")
	dsn := newRole(t, admin, name)
	dropSchemaLater(t, admin, name)
	open := func() *pgxpool.Pool {
		p, err := pgxpool.New(ctx, dsn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Close)
		return p
	}
	pool := open()
	var user, path string
	if err := pool.QueryRow(ctx, `SELECT current_user::text, current_setting('search_path')`).Scan(&user, &path); err != nil {
		t.Fatal(err)
	}
	if user != name || path != `"$user", public` {
		t.Fatalf("connected as %q with search_path %q; want role %q and the default search_path", user, path, name)
	}

	want := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, pgledger.ErrSchemaOnSearchPath) {
			t.Errorf("%s as role %s on schema %s: %v; want ErrSchemaOnSearchPath", what, name, name, err)
		} else {
			t.Logf("%s: %v", what, err)
		}
		if schemaExists(t, admin, name) {
			t.Fatalf("%s refused, but created the schema %s", what, name)
		}
	}
	_, err := pgledger.New(ctx, pool, pgledger.WithSchema(name))
	want("New", err)
	_, err = pgledger.Open(ctx, dsn, pgledger.WithSchema(name))
	want("Open", err)
	want("CheckSearchPath", pgledger.CheckSearchPath(ctx, pool, name))
	for _, driver := range sqlDrivers {
		db, err := sql.Open(driver, dsn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		_, err = pgledger.NewDB(ctx, db, pgledger.WithSchema(name))
		want("NewDB with "+driver, err)
	}
	// Another schema than the role's name is fine for this role.
	other := uniqueName("idemother_")
	dropSchemaLater(t, admin, other)
	if err := pgledger.CheckSearchPath(ctx, pool, other); err != nil {
		t.Errorf("CheckSearchPath of schema %s as role %s: %v", other, name, err)
	}

	// What the refusal prevents: the application's unqualified table lands
	// in the ledger's schema.
	l, err := pgledger.New(ctx, pool, pgledger.WithSchema(name), pgledger.AllowSchemaOnSearchPath())
	if err != nil {
		t.Fatalf("New with AllowSchemaOnSearchPath: %v", err)
	}
	table := uniqueName("settlements_")
	if _, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+table+` (id bigint)`); err != nil {
		t.Fatal(err)
	}
	if got := schemaOf(t, admin, table); got != name {
		t.Errorf("the application's CREATE TABLE %s went to schema %q; want the ledger's %q (the hazard)", table, got, name)
	}
	// With the ledger's schema created, New refuses all the same.
	_, err = pgledger.New(ctx, pool, pgledger.WithSchema(name))
	if !errors.Is(err, pgledger.ErrSchemaOnSearchPath) {
		t.Errorf("New on the existing schema %s: %v; want ErrSchemaOnSearchPath", name, err)
	}
	l.Close()

	// The fix the error names: the role's search_path without the schema.
	if _, err := admin.Exec(ctx, `ALTER ROLE `+pgx.Identifier{name}.Sanitize()+` SET search_path = public`); err != nil {
		t.Fatal(err)
	}
	pool = open()
	if _, err := pgledger.New(ctx, pool, pgledger.WithSchema(name)); err != nil {
		t.Fatalf("New after ALTER ROLE ... SET search_path = public: %v", err)
	}
	table = uniqueName("settlements_")
	if _, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+table+` (id bigint)`); err != nil {
		t.Fatal(err)
	}
	if got := schemaOf(t, admin, table); got != "public" {
		t.Errorf("the application's CREATE TABLE %s went to schema %q; want public", table, got)
	}
}

// TestSearchPathNamesSchema: an explicit search_path (a connection
// parameter) that names the schema is refused as "$user" is, quoted or
// not; one that does not name it is accepted.
func TestSearchPathNamesSchema(t *testing.T) {
	t.Parallel()
	admin := newPool(t)
	ctx := context.Background()
	schema := uniqueName("idemsp_")
	dropSchemaLater(t, admin, schema)
	for _, tc := range []struct {
		path    string
		refused bool
	}{
		{`public, ` + schema, true},
		{`"` + schema + `",public`, true},
		{` public , "` + schema + `" `, true},
		{`public`, false},
		{`"$user", public`, false}, // the test's role is not named like the schema
		{`public, "` + schema + `x"`, false},
	} {
		cfg, err := pgxpool.ParseConfig(testDSN(t))
		if err != nil {
			t.Fatal(err)
		}
		cfg.ConnConfig.RuntimeParams["search_path"] = tc.path
		p, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		err = pgledger.CheckSearchPath(ctx, p, schema)
		if got := errors.Is(err, pgledger.ErrSchemaOnSearchPath); got != tc.refused {
			t.Errorf("search_path %q, schema %s: %v; want refused %v", tc.path, schema, err, tc.refused)
		}
		p.Close()
	}
}

// TestDocumentedRolesMissTheSchema: the role of the test server that
// scripts/pg.sh starts, and of every postgres:// URL in README.md and the
// pages of docs/, is not named like the ledger's default schema, so
// following them never puts the ledger's schema on the application's
// search_path.
func TestDocumentedRolesMissTheSchema(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	if err := pgledger.CheckSearchPath(context.Background(), pool, ""); err != nil {
		t.Errorf("the test server's role (scripts/pg.sh) with the default schema: %v", err)
	}
	pages, err := filepath.Glob("../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	if len(pages) == 0 {
		t.Fatal("no pages in ../docs")
	}
	urlRE := regexp.MustCompile(`postgres(?:ql)?://([^:@/\s]+)[:@]`)
	n := 0
	for _, page := range append([]string{"../README.md"}, pages...) {
		b, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		urls := urlRE.FindAllStringSubmatch(string(b), -1)
		for _, m := range urls {
			if m[1] == pgledger.DefaultSchema {
				t.Errorf("%s: %s...: the role %q is named like the ledger's default schema", page, m[0], m[1])
			}
		}
		n += len(urls)
	}
	if n == 0 {
		t.Error("README.md and docs/ name no postgres:// URL with a user; update this test")
	}
}
