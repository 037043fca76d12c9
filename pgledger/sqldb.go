package pgledger

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// sqlDB is the adapter of a *sql.DB; sqlTx of a *sql.Tx. They work with
// any PostgreSQL driver of database/sql (pgx's stdlib, lib/pq): the
// ledger's array arguments are sent as PostgreSQL array literals (every
// array parameter of its SQL has a cast), and a text[] column is read
// from its text form, which both drivers return on Go 1.26.
type sqlDB struct{ db *sql.DB }

type sqlTx struct{ tx *sql.Tx }

// sqlConn is what a *sql.DB and a *sql.Tx both have.
type sqlConn interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

func (d sqlDB) exec(ctx context.Context, query string, args ...any) (int64, error) {
	return sqlExec(ctx, d.db, query, args)
}

func (t sqlTx) exec(ctx context.Context, query string, args ...any) (int64, error) {
	return sqlExec(ctx, t.tx, query, args)
}

func sqlExec(ctx context.Context, c sqlConn, query string, args []any) (int64, error) {
	res, err := c.ExecContext(ctx, query, sqlArgs(args)...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

func (d sqlDB) queryRow(ctx context.Context, query string, args []any, dest ...any) error {
	return d.db.QueryRowContext(ctx, query, sqlArgs(args)...).Scan(sqlDest(dest)...)
}

func (t sqlTx) queryRow(ctx context.Context, query string, args []any, dest ...any) error {
	return t.tx.QueryRowContext(ctx, query, sqlArgs(args)...).Scan(sqlDest(dest)...)
}

func (d sqlDB) query(ctx context.Context, query string, args []any, each func(scan func(dest ...any) error) error) error {
	return sqlQuery(ctx, d.db, query, args, each)
}

func (t sqlTx) query(ctx context.Context, query string, args []any, each func(scan func(dest ...any) error) error) error {
	return sqlQuery(ctx, t.tx, query, args, each)
}

func sqlQuery(ctx context.Context, c sqlConn, query string, args []any, each func(scan func(dest ...any) error) error) error {
	rows, err := c.QueryContext(ctx, query, sqlArgs(args)...)
	if err != nil {
		return err
	}
	defer rows.Close()
	scan := func(dest ...any) error { return rows.Scan(sqlDest(dest)...) }
	for rows.Next() {
		if err := each(scan); err != nil {
			return err
		}
	}
	return rows.Err()
}

// batchRow runs the statements and the query one after the other in a
// transaction of its own (database/sql has no batches).
func (d sqlDB) batchRow(ctx context.Context, pre []stmt, query string, args []any, dest ...any) error {
	return sqlBatchRow(ctx, d, pre, query, args, dest)
}

func sqlBatchRow(ctx context.Context, d beginner, pre []stmt, query string, args, dest []any) error {
	var rowErr error
	err := inTx(ctx, d, func(t tx) error {
		rowErr = t.batchRow(ctx, pre, query, args, dest...)
		if errors.Is(rowErr, sql.ErrNoRows) {
			return nil // commit what pre did
		}
		return rowErr
	})
	if err != nil {
		return err
	}
	return rowErr
}

func (t sqlTx) batchRow(ctx context.Context, pre []stmt, query string, args []any, dest ...any) error {
	for _, s := range pre {
		if _, err := t.exec(ctx, s.query, s.args...); err != nil {
			return err
		}
	}
	return t.queryRow(ctx, query, args, dest...)
}

// batch runs the statements one after the other in a transaction of its
// own (database/sql has no batches).
func (d sqlDB) batch(ctx context.Context, stmts []stmt) ([]int64, error) {
	return sqlBatch(ctx, d, stmts)
}

func sqlBatch(ctx context.Context, d beginner, stmts []stmt) ([]int64, error) {
	var n []int64
	err := inTx(ctx, d, func(t tx) (err error) {
		n, err = t.batch(ctx, stmts)
		return err
	})
	return n, err
}

func (t sqlTx) batch(ctx context.Context, stmts []stmt) ([]int64, error) {
	n := make([]int64, len(stmts))
	for i, s := range stmts {
		var err error
		if n[i], err = t.exec(ctx, s.query, s.args...); err != nil {
			return nil, err
		}
	}
	return n, nil
}

func (d sqlDB) begin(ctx context.Context) (tx, error) {
	t, err := d.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	return sqlTx{t}, nil
}

func (d sqlDB) pin(ctx context.Context) (pinned, error) {
	c, err := d.db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	return sqlPinned{c}, nil
}

// sqlPinned is the adapter of one connection of a *sql.DB (db.pin).
type sqlPinned struct{ c *sql.Conn }

func (p sqlPinned) exec(ctx context.Context, query string, args ...any) (int64, error) {
	return sqlExec(ctx, p.c, query, args)
}

func (p sqlPinned) queryRow(ctx context.Context, query string, args []any, dest ...any) error {
	return p.c.QueryRowContext(ctx, query, sqlArgs(args)...).Scan(sqlDest(dest)...)
}

func (p sqlPinned) query(ctx context.Context, query string, args []any, each func(scan func(dest ...any) error) error) error {
	return sqlQuery(ctx, p.c, query, args, each)
}

func (p sqlPinned) batch(ctx context.Context, stmts []stmt) ([]int64, error) {
	return sqlBatch(ctx, p, stmts)
}

func (p sqlPinned) batchRow(ctx context.Context, pre []stmt, query string, args []any, dest ...any) error {
	return sqlBatchRow(ctx, p, pre, query, args, dest)
}

func (p sqlPinned) begin(ctx context.Context) (tx, error) {
	t, err := p.c.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	return sqlTx{t}, nil
}

// release closes the connection when destroy: database/sql drops a
// connection whose use reported driver.ErrBadConn.
func (p sqlPinned) release(destroy bool) {
	if destroy {
		_ = p.c.Raw(func(any) error { return driver.ErrBadConn })
	}
	_ = p.c.Close()
}

func (t sqlTx) commit(context.Context) error { return t.tx.Commit() }
func (t sqlTx) rollback(context.Context)     { _ = t.tx.Rollback() }

// sqlArgs returns args with the slices the ledger passes (text[],
// bigint[], integer[] and float8[] parameters) written as PostgreSQL array
// literals; a nil slice stays NULL.
func sqlArgs(args []any) []any {
	out, copied := args, false
	for i, a := range args {
		var lit string
		switch v := a.(type) {
		case []string:
			if v == nil {
				continue
			}
			lit = arrayLiteral(v, quoteElem)
		case []int64:
			if v == nil {
				continue
			}
			lit = arrayLiteral(v, func(n int64) string { return strconv.FormatInt(n, 10) })
		case []int32:
			if v == nil {
				continue
			}
			lit = arrayLiteral(v, func(n int32) string { return strconv.FormatInt(int64(n), 10) })
		case []*float64:
			if v == nil {
				continue
			}
			lit = arrayLiteral(v, func(f *float64) string {
				if f == nil {
					return "NULL"
				}
				return strconv.FormatFloat(*f, 'g', -1, 64)
			})
		default:
			continue
		}
		if !copied {
			out, copied = append([]any(nil), args...), true
		}
		out[i] = lit
	}
	return out
}

func arrayLiteral[T any](v []T, elem func(T) string) string {
	var b strings.Builder
	b.WriteByte('{')
	for i, e := range v {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(elem(e))
	}
	b.WriteByte('}')
	return b.String()
}

// quoteElem quotes s as an element of an array literal.
func quoteElem(s string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s) + `"`
}

// sqlDest returns dest with every *[]string replaced by a textArray that
// fills it.
func sqlDest(dest []any) []any {
	out, copied := dest, false
	for i, d := range dest {
		p, ok := d.(*[]string)
		if !ok {
			continue
		}
		if !copied {
			out, copied = append([]any(nil), dest...), true
		}
		out[i] = textArray{p}
	}
	return out
}

// textArray scans a one-dimensional text[] column from its text form
// ({a,"b c"}) into *p; NULL makes it nil.
type textArray struct{ p *[]string }

func (a textArray) Scan(src any) error {
	var s string
	switch v := src.(type) {
	case nil:
		*a.p = nil
		return nil
	case string:
		s = v
	case []byte:
		s = string(v)
	default:
		return fmt.Errorf("pgledger: a text[] column came as %T", src)
	}
	v, err := parseTextArray(s)
	if err != nil {
		return fmt.Errorf("pgledger: text[] %.40q: %w", s, err)
	}
	*a.p = v
	return nil
}

// parseTextArray parses the text form of a one-dimensional text[] (the
// default lower bound; no NULL element).
func parseTextArray(s string) ([]string, error) {
	if len(s) < 2 || s[0] != '{' || s[len(s)-1] != '}' {
		return nil, errors.New("not an array of one dimension")
	}
	body := s[1 : len(s)-1]
	out := []string{}
	if body == "" {
		return out, nil
	}
	for i := 0; ; {
		var e strings.Builder
		if i < len(body) && body[i] == '"' {
			i++
			for ; i < len(body) && body[i] != '"'; i++ {
				if body[i] == '\\' {
					i++
					if i == len(body) {
						break
					}
				}
				e.WriteByte(body[i])
			}
			if i >= len(body) {
				return nil, errors.New("unterminated quoted element")
			}
			i++ // the closing quote
		} else {
			j := strings.IndexByte(body[i:], ',')
			if j < 0 {
				j = len(body) - i
			}
			el := body[i : i+j]
			if el == "NULL" || strings.ContainsAny(el, `{}"\`) {
				return nil, fmt.Errorf("unexpected element %q", el)
			}
			e.WriteString(el)
			i += j
		}
		out = append(out, e.String())
		if i == len(body) {
			return out, nil
		}
		if body[i] != ',' {
			return nil, fmt.Errorf("unexpected %q after an element", body[i])
		}
		i++
	}
}
