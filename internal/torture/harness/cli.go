package harness

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"sort"
	"time"
)

// Main parses args (the command's, without its name), runs the torture
// test and returns the exit status: 0 fine, 1 violations, 2 setup or usage
// error, 3 a worker failed (exited non-zero, or did not finish), without
// violations. The report goes to stdout; its last line is
//
//	torture: store=S mode=M kills=N keys=K effects=E duplicates=D lost=L unknown=U violations=V
func Main(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("torture", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg Config
	fs.StringVar(&cfg.Store, "store", "sqlite", "store: "+backendNames())
	fs.StringVar(&cfg.Mode, "mode", "atleastonce", "mode: atleastonce|atmostonce|twophase|tx|outbox (tx = Ledger.RunTx; outbox = RunTx with outbox.Put, and relays posting to a receiver; stores with RunTx or an outbox only)")
	fs.IntVar(&cfg.Kills, "kills", 100, "number of SIGKILLs in the kill phase")
	fs.IntVar(&cfg.Keys, "keys", 50, "number of keys (jobs of 5 daily periods each)")
	fs.IntVar(&cfg.Workers, "workers", 4, "number of worker processes")
	fs.Int64Var(&cfg.Seed, "seed", 0, "random seed for key orders, victims and kill moments (default: time-based)")
	fs.DurationVar(&cfg.Duration, "duration", 60*time.Second, "longest time for the kill phase")
	fs.StringVar(&cfg.Dir, "dir", "", "directory for the store and logs; must be empty (default: a temp dir, removed at the end)")
	fs.BoolVar(&cfg.Keep, "keep", false, "keep the temp dir (it is always kept after violations or errors)")
	fs.DurationVar(&cfg.Lease, "lease", 100*time.Millisecond, "lease of each claim: short, so that a killed worker's claim expires quickly")
	fs.DurationVar(&cfg.Stall, "stall", defaultStall, "a worker that settles no key for this long (or runs this long past the deadline) is stuck: reported with its goroutines, and stopped")
	backendsMu.Lock()
	var names []string
	for n := range backends {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if f := backends[n].Flags; f != nil {
			f(fs)
		}
	}
	backendsMu.Unlock()
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: torture [flags]\n\nA kill -9 torture test of idem.Run. Exit status: 0 fine, 1 violations, 2 setup or usage error, 3 worker failure.\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "torture: unexpected arguments %q\n", fs.Args())
		fs.Usage()
		return 2
	}
	seedSet := false
	fs.Visit(func(f *flag.Flag) { seedSet = seedSet || f.Name == "seed" })
	if !seedSet {
		cfg.Seed = time.Now().UnixNano()
	}
	cfg.Out = stdout
	s, err := Run(cfg)
	if err != nil {
		var ue usageError
		if errors.As(err, &ue) {
			fmt.Fprintf(stderr, "torture: %v\n", err)
			fs.Usage()
		} else {
			fmt.Fprintf(stderr, "torture: setup: %v\n", err)
		}
		return 2
	}
	switch {
	case s.Violations > 0:
		return 1
	case len(s.Errors) > 0:
		return 3
	}
	return 0
}
