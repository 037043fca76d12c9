package pgledger_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idemgo/idem/pgledger"
)

// column is a column's declaration as information_schema gives it.
type column struct {
	table, name, typ string
	notNull          bool
	hasDefault       bool
}

func (c column) String() string {
	return fmt.Sprintf("%s %s %s notnull=%t default=%t", c.table, c.name, strings.ReplaceAll(c.typ, " ", "_"), c.notNull, c.hasDefault)
}

// schemaListEnv makes TestSchemaExpandOnly write the current version's list
// (testdata/schema_v<SchemaVersion>.txt), which the next version's test
// compares with. Run it at the last commit of each schema version.
const schemaListEnv = "IDEM_WRITE_SCHEMA_LIST"

// TestSchemaExpandOnly guards the rule that lets releases N and N+1 share a
// schema (see SchemaVersion): every column of version SchemaVersion-1 (the
// list in testdata, written by that version) still exists with the same
// type and nullness, and every column added since to one of its tables is
// nullable or has a default, so that the previous version's INSERTs still
// work. New tables are free.
func TestSchemaExpandOnly(t *testing.T) {
	pool := newPool(t)
	ctx := context.Background()
	l := openLedger(t, pool)
	rows, err := pool.Query(ctx, `SELECT table_name, column_name, data_type, is_nullable = 'NO', column_default IS NOT NULL
		FROM information_schema.columns WHERE table_schema = $1 ORDER BY table_name, ordinal_position`, l.Schema())
	if err != nil {
		t.Fatal(err)
	}
	var cols []column
	for rows.Next() {
		var c column
		if err := rows.Scan(&c.table, &c.name, &c.typ, &c.notNull, &c.hasDefault); err != nil {
			t.Fatal(err)
		}
		c.typ = strings.ReplaceAll(c.typ, " ", "_")
		cols = append(cols, c)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if os.Getenv(schemaListEnv) != "" {
		var b strings.Builder
		for _, c := range cols {
			fmt.Fprintln(&b, c)
		}
		path := filepath.Join("testdata", fmt.Sprintf("schema_v%d.txt", pgledger.SchemaVersion))
		if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s", path)
	}
	prev := pgledger.SchemaVersion - 1
	prevPath := filepath.Join("testdata", fmt.Sprintf("schema_v%d.txt", prev))
	f, err := os.Open(prevPath)
	if err != nil {
		t.Fatalf("the list of version %d's columns: %v (write it with %s=1 go test -run TestSchemaExpandOnly . at that version's last commit)", prev, err, schemaListEnv)
	}
	defer f.Close()
	now := map[string]column{}
	for _, c := range cols {
		now[c.table+"."+c.name] = c
	}
	prevTables, prevCols := map[string]bool{}, map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var p column
		var notNull, hasDefault string
		if _, err := fmt.Sscanf(sc.Text(), "%s %s %s %s %s", &p.table, &p.name, &p.typ, &notNull, &hasDefault); err != nil {
			t.Fatalf("%s: line %q: %v", prevPath, sc.Text(), err)
		}
		p.notNull, p.hasDefault = notNull == "notnull=true", hasDefault == "default=true"
		prevTables[p.table], prevCols[p.table+"."+p.name] = true, true
		c, ok := now[p.table+"."+p.name]
		switch {
		case !ok:
			t.Errorf("version %d's column %s.%s is gone (dropped or renamed): version %d still reads or writes it", prev, p.table, p.name, prev)
		case c.typ != p.typ || c.notNull != p.notNull:
			t.Errorf("column %s.%s changed from %s notnull=%t to %s notnull=%t: version %d still reads or writes it", p.table, p.name, p.typ, p.notNull, c.typ, c.notNull, prev)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(prevCols) == 0 {
		t.Fatalf("%s lists no columns", prevPath)
	}
	for _, c := range cols {
		if prevTables[c.table] && !prevCols[c.table+"."+c.name] && c.notNull && !c.hasDefault {
			t.Errorf("column %s.%s, added since version %d, is NOT NULL without a default: version %d's INSERTs into %s would fail", c.table, c.name, prev, prev, c.table)
		}
	}
}
