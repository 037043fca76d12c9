// Package storeof lets package idemstore find the store behind a store of
// package idem (a *Ledger's or a *StateFile's), which it cannot import:
// package idem sets Unwrap when it is initialised.
package storeof

import "fmt"

// Unwrap returns the idemstore.Store behind s, if s is a store of package
// idem; nil otherwise. Set once, by package idem's init.
var Unwrap func(s any) any

// Wrapper is a value of this module's packages that stands for the store
// it holds (see core.TxStore): idemstore.Of returns the store behind it.
type Wrapper interface{ StoreBehind() any }

// TypeName is the name of s's type for messages: that of the store of
// package idem that s stands for (*idem.Ledger, not the unexported type
// behind it), else %T's. Package idem sets Named.
func TypeName(s any) string {
	if Named != nil {
		if n := Named(s); n != "" {
			return n
		}
	}
	return fmt.Sprintf("%T", s)
}

// Named names the unexported store types of package idem; "" for any
// other value. Set once, by package idem's init.
var Named func(s any) string

// Lacks is the error of the call named call on the store s, which is not
// the store interface want that the call needs ("idemstore.ItemStore"):
// the calls take idem.Store, whose store methods are out of view, so this
// is found at run time, before anything is written.
func Lacks(call string, s any, want string) error {
	return fmt.Errorf("idem: %s: the store %s cannot serve it: it is not an %s", call, TypeName(s), want)
}
