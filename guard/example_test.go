package guard_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/idemgo/idem/guard"

	"github.com/idemgo/idem"
)

// A guard of your own (here a Func) defers a Run, which leaves no
// record; the next trigger runs it.
func ExampleFunc() {
	dir, _ := os.MkdirTemp("", "idem-example")
	defer os.RemoveAll(dir)
	l, err := idem.OpenLedger(filepath.Join(dir, "ledger.db"))
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	maintenance := true
	partner := guard.Func("partner", func(context.Context) error {
		if maintenance {
			return errors.New("partner API in maintenance until 03:00")
		}
		return nil
	})
	key := idem.Key{Job: "daily_export", Period: "2026-10-27"}
	export := func(context.Context) error { fmt.Println("exported"); return nil }
	for range 2 {
		err := l.Run(context.Background(), key, export, idem.WithGuard(partner))
		var d *idem.Deferral
		if errors.As(err, &d) {
			fmt.Println("deferred by", d.Reason+":", d.Err)
		}
		maintenance = false
	}
	// Output:
	// deferred by partner: partner API in maintenance until 03:00
	// exported
}
