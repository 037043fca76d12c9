package idem

import "github.com/idemgo/idem/idemstore"

// ItemCounts counts a period's items by status: what [EachResult] reports.
type ItemCounts = idemstore.ItemCounts

// openItems is the number of c's items that are not settled and can still
// be worked (unknown items are settled only by a check or a person).
func openItems(c ItemCounts) int64 { return c.Pending + c.Running + c.Failed }
