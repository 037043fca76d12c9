// Command torture is the kill -9 torture test of idem's Run protocol
// (github.com/idemgo/idem/internal/torture) with one more store: the Redis
// store, whose workers each open a client of their own (separate "hosts",
// as far as the server can tell) on a fresh prefix of the server that
// -redis-addr or $IDEM_TEST_REDIS_ADDR names.
//
//	cd redisstore && go run ./internal/torture -store redis -mode atmostonce -kills 300 -keys 2000
//
// Every flag, the report and its last line,
//
//	torture: store=redis mode=M kills=N keys=K effects=E duplicates=D lost=L unknown=U violations=V
//
// and the exit status are those of the root module's command. To crash the
// server during a run as well, against a server of scripts/redis.sh:
//
//	go run ./internal/torture -store redis -mode twophase -kills 300 -keys 2000 &
//	sleep 3; ../scripts/redis.sh crash; sleep 3; ../scripts/redis.sh crash; wait
//
// (SIGKILL of redis-server and a restart that reloads its append-only
// file; a worker that opens its store meanwhile waits for the server.)
// The root command's stores (sqlite, statefile) work here too. The Redis
// store has no RunTx: -mode tx is refused. The run's keys are deleted at the end, unless the run's
// directory is kept (-keep, -dir, violations or errors): then the report
// names their prefix.
package main

import (
	"os"

	"github.com/idemgo/idem/internal/torture/harness"
)

func main() {
	harness.Register(redisBackend())
	if harness.IsWorker() {
		os.Exit(harness.RunWorker())
	}
	os.Exit(harness.Main(os.Args[1:], os.Stdout, os.Stderr))
}
