// Package gorm shows mysqlledger under GORM: RunTx's *sql.Tx given to a
// GORM session, so the business rows GORM writes and the key's done mark
// commit in one transaction. It is a module of its own, not published, so
// that no user of mysqlledger gets GORM through it.
package gorm
