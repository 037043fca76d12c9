// Package compattest proves pgledger's DBLedger with the database/sql
// drivers and libraries its documentation names beside pgx's stdlib: the
// conformance kits on lib/pq, and RunTx's transaction shared with sqlx and
// GORM (its writes commit with the done mark, once, or roll back with it).
//
// It is a module of its own so that lib/pq, sqlx and GORM are no
// requirement of the pgledger module: it is not published, and nothing
// imports it. Its tests need PostgreSQL, as pgledger's do
// ($IDEM_TEST_PG_DSN; scripts/pg.sh starts one).
package compattest
