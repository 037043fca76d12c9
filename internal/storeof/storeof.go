// Package storeof lets package idemstore find the store behind a store of
// package idem (a *Ledger's or a *StateFile's), which it cannot import:
// package idem sets Unwrap when it is initialised.
package storeof

// Unwrap returns the idemstore.Store behind s, if s is a store of package
// idem; nil otherwise. Set once, by package idem's init.
var Unwrap func(s any) any

// Wrapper is a value of this module's packages that stands for the store
// it holds (see core.TxStore): idemstore.Of returns the store behind it.
type Wrapper interface{ StoreBehind() any }
