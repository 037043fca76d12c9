package pgledger

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"
)

// ErrSchemaOnSearchPath is returned by [New], [Open], [NewDB] and
// [CheckSearchPath] when the ledger's schema is on the connection's
// search_path, or would be once created: typically a role named like the
// schema ("idem") with PostgreSQL's default search_path, "$user", public.
// The application's unqualified names then resolve into the ledger's
// schema: its CREATE TABLE IF NOT EXISTS creates its tables there (an empty
// settlements beside the ledger's tables, while public.settlements holds
// the data), and its queries can read the ledger's own tables (runs, jobs)
// as its own. The ledger qualifies every name it uses and would work; the
// application around it would not, silently.
var ErrSchemaOnSearchPath = errors.New("pgledger: the ledger's schema is on the connection's search_path")

// AllowSchemaOnSearchPath makes [New], [Open] and [NewDB] accept a
// connection whose search_path names the ledger's schema (see
// [ErrSchemaOnSearchPath]), for a database where every name the
// application uses is schema-qualified.
func AllowSchemaOnSearchPath() Option { return func(c *config) { c.allowSearchPath = true } }

// CheckSearchPath reports, with an error matching [ErrSchemaOnSearchPath],
// whether the ledger's schema (schema, or [DefaultSchema] if empty) is or
// would be on the search_path of pool's connections, and writes nothing.
// New, Open and NewDB make the same check before they create anything;
// `idem doctor --postgres` runs it too.
//
// It sees one connection of pool: a search_path that differs between
// connections (set by a pool's AfterConnect hook, say) is checked only as
// that connection has it.
func CheckSearchPath(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	if pool == nil {
		return errors.New("pgledger: CheckSearchPath with a nil pool")
	}
	if schema == "" {
		schema = DefaultSchema
	}
	return checkSearchPath(ctx, pgxDB{pool}, schema)
}

// checkSearchPath is CheckSearchPath on any connection.
func checkSearchPath(ctx context.Context, q conn, schema string) error {
	var role, path string
	var present bool
	if err := q.queryRow(ctx, `SELECT current_user::text, current_setting('search_path'), $1::text = ANY(current_schemas(false))`,
		[]any{schema}, &role, &path, &present); err != nil {
		return fmt.Errorf("pgledger: schema %q: reading the connection's search_path: %w", schema, err)
	}
	if !present && !searchPathNames(path, role, schema) {
		return nil
	}
	why := ""
	if role == schema {
		why = fmt.Sprintf(", where \"$user\" means the role %q", role)
	}
	return fmt.Errorf("%w: schema %q is on search_path %s of role %q%s: the application's unqualified table names "+
		"would resolve into the ledger's schema (its CREATE TABLE would create its tables there, its queries could read "+
		"%s.runs and %s.jobs). Connect as a role with another name, or give the role a search_path without %s "+
		"(ALTER ROLE %s SET search_path = public), or keep the ledger in another schema (pgledger.WithSchema; "+
		"the idem command's --postgres-schema); pgledger.AllowSchemaOnSearchPath accepts it as it is",
		ErrSchemaOnSearchPath, schema, path, role, why, quoteIdent(schema), quoteIdent(schema), quoteIdent(schema), quoteIdent(role))
}

// searchPathNames reports whether the search_path setting path names
// schema for a session of role: its elements are separated by commas,
// double-quoted ones taken as they are ("" for a quote), others folded to
// lower case, and $user (quoted or not) stands for the role. It names
// schemas that do not exist yet, which current_schemas leaves out.
func searchPathNames(path, role, schema string) bool {
	for _, name := range splitSearchPath(path) {
		if name == "$user" {
			name = role
		}
		if name == schema {
			return true
		}
	}
	return false
}

// splitSearchPath splits a search_path setting into its schema names.
func splitSearchPath(path string) []string {
	var names []string
	var b strings.Builder
	quoted, inQuotes := false, false
	flush := func() {
		s := b.String()
		if !quoted {
			s = strings.ToLower(strings.TrimSpace(s))
		}
		if s != "" || quoted {
			names = append(names, s)
		}
		b.Reset()
		quoted = false
	}
	for i := 0; i < len(path); i++ {
		c := path[i]
		switch {
		case inQuotes && c == '"' && i+1 < len(path) && path[i+1] == '"':
			b.WriteByte('"')
			i++
		case c == '"':
			if !inQuotes && !quoted {
				b.Reset() // whitespace before the quote
			}
			inQuotes = !inQuotes
			quoted = true
		case inQuotes:
			b.WriteByte(c)
		case c == ',':
			flush()
		case quoted:
			// whitespace after the closing quote
		default:
			b.WriteByte(c)
		}
	}
	flush()
	return names
}

// quoteIdent quotes name as an SQL identifier, for the error's advice.
func quoteIdent(name string) string {
	if name != "" && strings.Trim(strings.ToLower(name), "abcdefghijklmnopqrstuvwxyz0123456789_") == "" && name == strings.ToLower(name) && (name[0] < '0' || name[0] > '9') {
		return name
	}
	return `"` + strings.ReplaceAll(name, `"`, `""`) + `"`
}
