// Package storeof names the stores of package idem, which package
// idemstore cannot import, and what a call finds wrong with a store.
package storeof

import "fmt"

// Wrapper is a value that stands for the store it holds (*idem.Ledger,
// *idem.StateFile, idem.TxStoreOf's): idemstore.Of returns the store
// behind it.
type Wrapper interface{ StoreBehind() any }

// Named is a store that names itself in messages by a type other than
// its own (an unexported type of package idem: "*idem.Ledger").
type Named interface{ StoreName() string }

// TypeName is the name of s's type for messages: that of the store of
// package idem that s stands for (*idem.Ledger, not the unexported type
// behind it: a Named store's StoreName), else %T's.
func TypeName(s any) string {
	if n, ok := s.(Named); ok {
		return n.StoreName()
	}
	return fmt.Sprintf("%T", s)
}

// Lacks is the error of the call named call on the store s, which is not
// the store interface want that the call needs ("idemstore.ItemStore"):
// the calls take idem.Store, whose store methods are out of view, so this
// is found at run time, before anything is written.
func Lacks(call string, s any, want string) error {
	return fmt.Errorf("idem: %s: the store %s cannot serve it: it is not an %s", call, TypeName(s), want)
}
