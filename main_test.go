package idem_test

import (
	"flag"
	"os"
	"runtime"
	"strconv"
	"testing"
)

// TestMain runs up to four parallel tests per CPU unless -parallel is given.
// Most tests of this package wait rather than compute: on child processes
// being started and killed, on fsync, on leases running out. The default of
// one per CPU would leave the CPUs idle while they wait. The tests keep time
// on fake clocks; the one that must use the system clock (the heartbeat's)
// leaves a margin of two thirds of its lease.
func TestMain(m *testing.M) {
	flag.Parse()
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if !given {
		if err := flag.Set("test.parallel", strconv.Itoa(4*runtime.GOMAXPROCS(0))); err != nil {
			panic(err)
		}
	}
	os.Exit(m.Run())
}
