// Command torture is a kill -9 torture test of idem's Run protocol.
//
//	go run ./internal/torture -store sqlite -mode tx -kills 100
//	go run ./internal/torture -store sqlite -mode outbox -kills 300 -keys 2500
//
// It starts -workers worker processes (this binary, re-executed with
// $IDEM_TORTURE_WORKER set) that each run every key with idem.Run until it
// is settled from their point of view; meanwhile it SIGKILLs a random worker
// at a random moment and restarts it, -kills times (or for -duration). Then
// it lets the workers finish and checks the store against the effects: the
// lines of an effects log written by fn (the "downstream"), or, for -mode tx,
// a counter row that fn bumps in the ledger's own database.
//
// The last line is
//
//	torture: store=S mode=M kills=N keys=K effects=E duplicates=D lost=L unknown=U violations=V
//
// violations = duplicates (except in atleastonce, where they are allowed) +
// lost (keys neither done nor unknown) + keys done without any effect. With
// the statefile store, the periods after an unknown period of a job cannot
// run before it is resolved; they are counted as unknown ("blocked").
//
// Exit status: 0 fine, 1 violations, 2 setup or usage error, 3 a worker
// failed (exited non-zero, or did not finish), without violations.
//
// A worker that settles no key for -stall (10 s) is stuck: it logs the key
// it is in Run of, prints its goroutines and exits 3; one still running
// -stall after the run's deadline is sent SIGQUIT (the Go runtime prints its
// goroutines), then killed. The report names each such worker with what the
// workers logged about its key's job and its goroutines (each worker's
// stderr is <dir>/w<slot>.<restart>.stderr), so a hang ends the run fast
// instead of holding it.
//
// -mode outbox (stores with an outbox: sqlite, and postgres in the
// pgledger module) tests the transactional outbox instead: each key is a
// RunTx that bumps its business row, writing the attempt's nonce, and queues
// 1 to 3 messages with outbox.Put on four topics; the first attempt of every
// fourth key is rolled back on purpose after its Puts, and every tenth key
// never commits (it parks). Each worker also runs a relay (idem.Relay with
// the Webhook deliverer) posting to a receiver in this process on loopback,
// which records every request and refuses one in twenty (503). The kills
// hit transactions and relays alike. The checker: every committed message
// delivered at least once; no message of a rolled-back or killed attempt
// ever delivered (its nonce is not the row's); per topic, no message sent
// before every earlier one of its topic was accepted; one stable id per
// message, so that a receiver deduping by it applies each exactly once; each
// committed row bumped once. A line before the last one gives the figures:
//
//	torture: outbox: messages=M requests=R refused=F redelivered=D applied=A rolledback_keys=B abandoned_keys=N
//
// and in the last line, effects counts the business rows' bumps, lost the
// keys not settled and the messages not delivered.
//
// The stores here are sqlite and statefile. The logic is package harness,
// which other modules' commands reuse with stores of their own: the
// Postgres ledger's is in the pgledger module,
//
//	cd pgledger && go run ./internal/torture -store postgres -mode tx -kills 100
//	cd pgledger && go run ./internal/torture -store postgres -mode outbox -kills 300 -keys 2500
package main

import (
	"os"

	"github.com/idemgo/idem/internal/torture/harness"
)

func main() {
	if harness.IsWorker() {
		os.Exit(harness.RunWorker())
	}
	os.Exit(harness.Main(os.Args[1:], os.Stdout, os.Stderr))
}
