package idemstore_test

import (
	"fmt"

	"github.com/idemgo/idem/idemstore"
)

// A period's request id (format 1) and an item's (item format 2) are
// apart: item "acct-7" of period "2026-10-27" does not share the id of a
// period named "2026-10-27/acct-7".
func ExampleKey_ItemRequestID() {
	key := idemstore.Key{Job: "points", Period: "2026-10-27"}
	fmt.Println(key.RequestID())
	fmt.Println(key.ItemRequestID("acct-7"))
	fmt.Println(idemstore.Key{Job: "points", Period: "2026-10-27/acct-7"}.RequestID())
	// Output:
	// idem-38441b3f3e62bc26896e61f72e876a4a
	// idem-b80d900b316a4917fa022a6fcbc3d5c9
	// idem-c0adeac731caa213d606d222473d9a2c
}
