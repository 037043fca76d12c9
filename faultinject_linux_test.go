package idem_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemstore"
	"github.com/idemgo/idem/internal/faultinj"
	"github.com/idemgo/idem/outbox"
)

// The fault-injection test re-executes its binary as a child that performs
// one operation on a store in a directory and prints its result.
const (
	envFaultOp  = "IDEM_TEST_FAULTINJ_OP"
	envFaultDir = "IDEM_TEST_FAULTINJ_DIR"
	fiMarker    = "FAULTINJ-RESULT "
	// fiMaxWhen caps the occurrence indexes tried per system call and path.
	fiMaxWhen = 12
	// fiTempSpread: the indexes tried around a temp file's call.
	fiTempSpread = 2
	// fiChildLimit bounds one child (strace and all): it is killed then.
	fiChildLimit = time.Minute
	// fiRelayLease is the relay's claim on a message: a relay that died
	// holding one leaves it to the next pass this much later.
	fiRelayLease = 2 * time.Second
)

// fiKey is the period every operation works on; fiPrev, done before.
var (
	fiKey  = idem.Key{Job: "faultinj", Period: "2026-10-28"}
	fiPrev = idem.Key{Job: "faultinj", Period: "2026-10-27"}
	fiMsg  = idem.Key{Job: "faultinj-queue", Period: "2026-10-27"}
)

// fiOps are the operations, each on a store prepared with fiPrev done (and,
// in a ledger, one pending outbox message queued by fiMsg's RunTx).
var fiOps = []string{"atleastonce", "atmostonce", "twophase", "runvalue", "runtx-outbox", "relayonce", "statefile"}

// fiFaults: each system call and the errors it is made to fail with.
var fiFaults = []struct {
	syscalls []string // the names of the call (the first the Go or SQLite code uses is found by counting)
	errnos   []string
}{
	{[]string{"fsync"}, []string{"EIO"}},
	{[]string{"fdatasync"}, []string{"EIO"}},
	{[]string{"write"}, []string{"ENOSPC", "EIO"}},
	{[]string{"pwrite64"}, []string{"ENOSPC", "EIO"}},
	{[]string{"rename", "renameat", "renameat2"}, []string{"EIO", "EXDEV"}},
	{[]string{"open", "openat"}, []string{"EMFILE", "EACCES"}},
	{[]string{"ftruncate"}, []string{"EIO"}},
}

// fiTarget is a file (or directory) of a store whose calls are failed.
type fiTarget struct {
	name    string
	path    string
	durable bool // a done mark lives in it (or in its entries, for the directory)
	// temp: a file of a name chosen at random (the state file's temp file),
	// matched by the prefix path instead. strace cannot name it with -P: its
	// calls are failed by their index among all the calls of the
	// operation's thread, found by a run without a fault.
	temp bool
}

// matches reports whether the file at p is tg.
func (tg fiTarget) matches(p string) bool {
	if tg.temp {
		return strings.HasPrefix(p, tg.path)
	}
	return p == tg.path
}

func fiTargets(op, dir string) []fiTarget {
	if op == "statefile" {
		state := filepath.Join(dir, "state.json")
		return []fiTarget{
			{"state", state, true, false},
			{"temp", filepath.Join(dir, ".state.json"), true, true},
			{"dir", dir, true, false},
			{"filelock", state + ".lock", false, false},
			{"joblock", stateJobLock(state), false, false},
		}
	}
	db := filepath.Join(dir, "ledger.db")
	return []fiTarget{
		{"db", db, true, false},
		{"wal", db + "-wal", true, false},
		{"shm", db + "-shm", false, false},
		{"dir", dir, true, false},
	}
}

// stateJobLock is the path of fiKey's job lock of the state file at path.
func stateJobLock(path string) string {
	s, err := idem.OpenStateFile(path)
	if err != nil {
		panic(err)
	}
	defer s.Close()
	return idem.StateLockPath(s, fiKey.Job)
}

// fiResult is what a child reports.
type fiResult struct {
	OK       bool   // the operation reported success
	Err      string // its error
	Returned int64  // when it returned, unix µs (before the store was closed)
	CloseErr string
	TID      int // the thread that did the operation
}

func fiOptions(op, dir string) []idem.Option {
	opts := []idem.Option{idem.WithBackoff(idem.Constant(time.Millisecond))}
	switch op {
	case "atmostonce":
		opts = append(opts, idem.AtMostOnce())
	case "twophase":
		opts = append(opts, idem.TwoPhase(func(context.Context, idem.Key) (bool, error) {
			return fiEffects(dir) > 0, nil
		}))
	case "atleastonce", "statefile":
		opts = append(opts, idem.AtLeastOnce())
	}
	return opts
}

// fiEffect is fn's effect: a line appended to dir/effect (a file no fault
// is injected into).
func fiEffect(dir string) error {
	f, err := os.OpenFile(filepath.Join(dir, "effect"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.WriteString("ran\n"); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func fiEffects(dir string) int {
	b, _ := os.ReadFile(filepath.Join(dir, "effect"))
	return bytes.Count(b, []byte("\n"))
}

// fiOpen opens the store of op in dir.
func fiOpen(op, dir string) (idem.Store, error) {
	if op == "statefile" {
		s, err := idem.OpenStateFile(filepath.Join(dir, "state.json"))
		if err != nil {
			return nil, err
		}
		return s, nil
	}
	l, err := idem.OpenLedger(filepath.Join(dir, "ledger.db"))
	if err != nil {
		return nil, err
	}
	return l, nil
}

// fiDo performs op once on s; ok: it reported success.
func fiDo(ctx context.Context, op, dir string, s idem.Store, relayURL string) (ok bool, err error) {
	fn := func(context.Context) error { return fiEffect(dir) }
	opts := fiOptions(op, dir)
	switch op {
	case "atleastonce", "atmostonce", "twophase", "statefile":
		err = idem.RunOn(ctx, s, fiKey, fn, opts...)
		return err == nil, err
	case "runvalue":
		var v int
		v, err = idem.RunValueOn(ctx, s, fiKey, func(context.Context) (int, error) { return 42, fiEffect(dir) }, opts...)
		if err == nil && v != 42 {
			return false, fmt.Errorf("RunValue returned %d, want 42", v)
		}
		return err == nil, err
	case "runtx-outbox":
		err = idem.RunTx(ctx, s.(*idem.Ledger), fiKey, func(ctx context.Context, tx *sql.Tx) error {
			_, err := outbox.Put(ctx, tx, outbox.Message{Topic: "faultinj", Payload: []byte(fiKey.Period)})
			return err
		}, opts...)
		return err == nil, err
	case "relayonce":
		var res outbox.Result
		res, err = outbox.RelayOnce(ctx, s, outbox.Webhook(relayURL, nil),
			outbox.WithBackoff(idem.Constant(time.Millisecond)), outbox.WithLease(fiRelayLease))
		return err == nil && res.Delivered == 1, err
	}
	panic("unknown operation " + op)
}

// fiReceiver serves the relay's webhook: it accepts every message.
func fiReceiver() *httptest.Server {
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNoContent)
	}))
}

// faultChild performs op on the store in dir, on one thread (strace counts
// a call's occurrences per thread), and prints its result.
func faultChild(op, dir string) {
	runtime.LockOSThread()
	watchdog := time.AfterFunc(fiChildLimit*2/3, func() {
		panic(fmt.Sprintf("faultinj child %s: still running after %s", op, fiChildLimit*2/3))
	})
	defer watchdog.Stop()
	srv := fiReceiver()
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), fiChildLimit/2)
	defer cancel()
	res := fiResult{TID: syscall.Gettid()}
	s, err := fiOpen(op, dir)
	if err == nil {
		res.OK, err = fiDo(ctx, op, dir, s, srv.URL)
	} else {
		err = fmt.Errorf("open: %w", err)
	}
	res.Returned = time.Now().UnixMicro()
	if err != nil {
		res.Err = err.Error()
	}
	if s != nil {
		if cerr := s.(closer).Close(); cerr != nil {
			res.CloseErr = cerr.Error()
		}
	}
	b, _ := json.Marshal(res)
	fmt.Printf("\n%s%s\n", fiMarker, b)
}

// closer is a store that can be closed.
type closer interface{ Close() error }

// TestFaultInjection runs each operation on each store (Run in every mode,
// RunValue, RunTx with outbox.Put, outbox.RelayOnce on the SQLite ledger;
// Run on the state file) under strace, with one system call on one of the
// store's files failing at one occurrence: every occurrence of fsync,
// fdatasync, write, pwrite64, rename, open(at) and ftruncate that the
// operation makes on the ledger, its -wal and -shm files and its directory
// (the state file, its locks and its directory), with the errors a disk
// gives (EIO, ENOSPC, EXDEV, EMFILE, EACCES). After each run it asserts, from
// a clean process:
//
//   - no false success: an operation that saw a write or a sync of a file
//     holding its done mark (or of that file's directory) fail before it
//     returned must not report success; one that reports success has its
//     period done in the store;
//   - the store opens consistent (SQLite's integrity_check);
//   - the next run of the same operation completes the period as its mode
//     promises (AtMostOnce: done, or unknown; never fn twice).
func TestFaultInjection(t *testing.T) {
	if op := os.Getenv(envFaultOp); op != "" {
		faultChild(op, os.Getenv(envFaultDir))
		return
	}
	if err := faultinj.Available(); err != nil {
		t.Skipf("fault injection needs strace: %v", err)
	}
	if testing.Short() {
		t.Skip("-short: the fault-injection test runs hundreds of child processes")
	}
	if raceEnabled {
		t.Skip("under the race detector each child takes seconds (SQLite is instrumented too): scripts/test.sh runs this test in its pass without it")
	}
	start := time.Now()
	tmpl := fiTemplates(t)

	var cases []fiCase
	for _, op := range fiOps {
		cases = append(cases, fiCount(t, op, tmpl)...)
	}
	t.Logf("%d injected runs planned (%s counting)", len(cases), time.Since(start).Round(time.Millisecond))

	// Two at a time.
	sem := make(chan struct{}, 2)
	var wg sync.WaitGroup
	for i := range cases {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			fiRunCase(t, &cases[i], tmpl)
		}()
	}
	wg.Wait()
	fiSummary(t, cases)
	t.Logf("fault injection took %s", time.Since(start).Round(time.Millisecond))
}

// fiCase is one injected run and what it found.
type fiCase struct {
	op     string
	target string
	inj    faultinj.Injection

	fired        []faultinj.Call // injected failures
	hit          bool            // one of them on the target
	syncs        string          // a call on the directory: the target whose entry it makes durable
	firedBefore  bool            // a durability-relevant one before the operation returned
	res          *fiResult
	died         string // the child gave no result: its output
	falseSuccess string
	inconsistent string
	notCompleted string
}

func (c *fiCase) name() string {
	if c.syncs != "" {
		return fmt.Sprintf("%s/%s(after:%s)/%s", c.op, c.target, c.syncs, c.inj)
	}
	return fmt.Sprintf("%s/%s/%s", c.op, c.target, c.inj)
}

// fiTemplates prepares each store once: fiPrev done, and in the ledger
// one pending outbox message. It returns the files, by op kind.
func fiTemplates(t *testing.T) map[string][]byte {
	t.Helper()
	ctx := context.Background()
	out := map[string][]byte{}
	dir := t.TempDir()
	l, err := idem.OpenLedger(filepath.Join(dir, "ledger.db"))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Run(ctx, fiPrev, func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if err := idem.RunTx(ctx, l, fiMsg, func(ctx context.Context, tx *sql.Tx) error {
		_, err := outbox.Put(ctx, tx, outbox.Message{Topic: "faultinj-queue", Payload: []byte("m")})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if out["ledger"], err = os.ReadFile(filepath.Join(dir, "ledger.db")); err != nil {
		t.Fatal(err)
	}
	s, err := idem.OpenStateFile(filepath.Join(dir, "state.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Run(ctx, fiPrev, func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if out["statefile"], err = os.ReadFile(filepath.Join(dir, "state.json")); err != nil {
		t.Fatal(err)
	}
	return out
}

// fiPrepare makes a fresh directory holding op's prepared store.
func fiPrepare(t *testing.T, op string, tmpl map[string][]byte) string {
	dir, err := os.MkdirTemp(t.TempDir(), "fi")
	if err != nil {
		panic(err)
	}
	name, kind := "ledger.db", "ledger"
	if op == "statefile" {
		name, kind = "state.json", "statefile"
	}
	if err := os.WriteFile(filepath.Join(dir, name), tmpl[kind], 0o644); err != nil {
		panic(err)
	}
	return dir
}

var fiAllSyscalls = func() []string {
	var all []string
	for _, f := range fiFaults {
		all = append(all, f.syscalls...)
	}
	return all
}()

// fiStrace runs the child for op in dir under strace (failing inj, if not
// nil), and returns its result (nil if it printed none), the calls strace
// saw, and the child's output.
func fiStrace(op, dir string, syscalls, paths []string, inj *faultinj.Injection) (*fiResult, []faultinj.Call, string, error) {
	trace := filepath.Join(dir, "strace.out")
	cmd := exec.Command("strace", faultinj.Args(trace, syscalls, paths, inj,
		os.Args[0], "-test.run=^TestFaultInjection$", "-test.count=1", "-test.timeout="+fiChildLimit.String())...)
	cmd.Env = append(os.Environ(), envFaultOp+"="+op, envFaultDir+"="+dir, "GOTRACEBACK=all")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, nil, "", err
	}
	timer := time.AfterFunc(fiChildLimit, func() { syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
	werr := cmd.Wait()
	killed := !timer.Stop()
	calls, perr := faultinj.Parse(trace)
	if perr != nil {
		return nil, nil, out.String(), perr
	}
	var res *fiResult
	if i := strings.LastIndex(out.String(), fiMarker); i >= 0 {
		line, _, _ := strings.Cut(out.String()[i+len(fiMarker):], "\n")
		res = new(fiResult)
		if err := json.Unmarshal([]byte(line), res); err != nil {
			return nil, calls, out.String(), err
		}
	}
	if killed {
		return res, calls, out.String(), fmt.Errorf("killed after %s: %v", fiChildLimit, werr)
	}
	if res == nil {
		return nil, calls, out.String(), fmt.Errorf("no result: %v", werr)
	}
	return res, calls, out.String(), nil
}

// fiTargetOf names the target a call's paths belong to ("" if none).
func fiTargetOf(c faultinj.Call, targets []fiTarget) string {
	for _, p := range c.Paths {
		for _, tg := range targets {
			if tg.matches(p) {
				return tg.name
			}
		}
	}
	return ""
}

// fiCount runs op once without a fault and plans a case for every
// occurrence index of every system call on every target.
func fiCount(t *testing.T, op string, tmpl map[string][]byte) []fiCase {
	t.Helper()
	dir := fiPrepare(t, op, tmpl)
	targets := fiTargets(op, dir)
	var paths []string
	hasTemp := false
	for _, tg := range targets {
		if tg.temp {
			hasTemp = true
		} else {
			paths = append(paths, tg.path)
		}
	}
	existed := map[string]bool{}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		existed[filepath.Join(dir, e.Name())] = true
	}
	res, calls, out, err := fiStrace(op, dir, append(fiAllSyscalls, "unlink", "unlinkat"), paths, nil)
	if err != nil || !res.OK {
		t.Fatalf("%s without a fault: %v %+v\n%s", op, err, res, out)
	}
	// Occurrences per (syscall, target, thread); strace counts per thread.
	type k struct {
		sc, target string
		tid        int
	}
	n := map[k]int{}
	tids := map[int]bool{}
	for _, c := range calls {
		if tg := fiTargetOf(c, targets); tg != "" {
			n[k{c.Syscall, tg, c.TID}]++
			tids[c.TID] = true
		}
	}
	syncs := fiDirSyncs(calls, targets, existed)
	most := map[[2]string]int{}
	for key, v := range n {
		most[[2]string{key.sc, key.target}] = max(most[[2]string{key.sc, key.target}], v)
	}
	var summary []string
	var cases []fiCase
	for _, tg := range targets {
		if tg.temp {
			continue
		}
		for _, f := range fiFaults {
			for _, sc := range f.syscalls {
				c := most[[2]string{sc, tg.name}]
				if c == 0 {
					continue
				}
				summary = append(summary, fmt.Sprintf("%s %s×%d", tg.name, sc, c))
				for _, errno := range f.errnos {
					for when := 1; when <= min(c, fiMaxWhen); when++ {
						cases = append(cases, fiCase{op: op, target: tg.name, inj: faultinj.Injection{Syscall: sc, Errno: errno, When: when},
							syncs: fiSyncs(tg, syncs, sc, when)})
					}
				}
			}
		}
	}
	var tl []int
	for tid := range tids {
		tl = append(tl, tid)
	}
	note := ""
	if len(tl) > 1 || (len(tl) == 1 && tl[0] != res.TID) {
		note = fmt.Sprintf(" (calls on threads %v, the operation's %d: strace counts per thread)", tl, res.TID)
	}
	t.Logf("%s: calls on its files without a fault: %s%s; the directory's: %v", op, strings.Join(summary, ", "), note, syncs)
	if hasTemp {
		cases = append(cases, fiCountTemp(t, op, tmpl)...)
	}
	return cases
}

// fiCountTemp runs op once without a fault and without -P, and plans a
// case for every call on a temp target by its index among the calls of the
// operation's thread.
func fiCountTemp(t *testing.T, op string, tmpl map[string][]byte) []fiCase {
	t.Helper()
	dir := fiPrepare(t, op, tmpl)
	targets := fiTargets(op, dir)
	res, calls, out, err := fiStrace(op, dir, fiAllSyscalls, nil, nil)
	if err != nil || !res.OK {
		t.Fatalf("%s without a fault: %v %+v\n%s", op, err, res, out)
	}
	index := map[string]int{} // by syscall, in the operation's thread
	var summary []string
	var cases []fiCase
	for _, c := range calls {
		if c.TID != res.TID {
			continue
		}
		index[c.Syscall]++
		name := fiTargetOf(c, targets)
		i := slices.IndexFunc(targets, func(tg fiTarget) bool { return tg.name == name })
		if i < 0 || !targets[i].temp || index[c.Syscall] > fiMaxWhen*4 {
			continue
		}
		summary = append(summary, fmt.Sprintf("%s %s #%d", name, c.Syscall, index[c.Syscall]))
		// The runtime's own calls in the thread (a write to the
		// netpoller's eventfd when a timer is set) vary between runs:
		// the indexes around it are tried too. A run whose failure hit
		// another call shows in its case (hit, died), and one that hit
		// the eventfd dies in the runtime ("netpollBreak write failed").
		for when := max(1, index[c.Syscall]-fiTempSpread); when <= index[c.Syscall]+fiTempSpread; when++ {
			for _, f := range fiFaults {
				if slices.Contains(f.syscalls, c.Syscall) {
					for _, errno := range f.errnos {
						cases = append(cases, fiCase{op: op, target: name, inj: faultinj.Injection{Syscall: c.Syscall, Errno: errno, When: when}})
					}
				}
			}
		}
	}
	t.Logf("%s: calls on temp files, by index in the operation's thread (±%d tried): %s", op, fiTempSpread, strings.Join(summary, ", "))
	return cases
}

// fiRelevant reports whether an injected failure of c can lose a done mark
// that the operation reports: a failed write or sync of a durable file, or
// a failed open of the directory it syncs.
//
// A directory's sync counts when it makes the entry of a durable file
// durable (syncs: see fiDirSyncs). The
// state file's temp file counts for its sync, not its write: a temp file
// whose write failed is never renamed (the state file writes a new one).
func fiRelevant(c faultinj.Call, targets []fiTarget, syncs string) bool {
	durable := func(name string) bool {
		i := slices.IndexFunc(targets, func(tg fiTarget) bool { return tg.name == name })
		return i >= 0 && targets[i].durable
	}
	name := fiTargetOf(c, targets)
	if !durable(name) {
		return false
	}
	switch c.Syscall {
	case "fsync", "fdatasync":
		return name != "dir" || syncs == "?" || durable(syncs)
	case "write", "pwrite64":
		return name != "dir" && name != "temp"
	case "open", "openat":
		return name == "dir" && (syncs == "?" || durable(syncs))
	}
	return false
}

// fiSyncs is what the when-th sc on tg makes durable, if tg is the
// directory.
func fiSyncs(tg fiTarget, syncs map[string]string, sc string, when int) string {
	if tg.name != "dir" {
		return ""
	}
	return syncs[fmt.Sprintf("%s#%d", sc, when)]
}

// fiDirSyncs maps each open and sync of the directory in calls (by call
// and index in its thread: "fsync#2") to the target whose directory entry
// it makes durable: the durable one last made (created, or renamed to)
// since the directory's last sync in that thread, else the last one made;
// "-" if none was (a sync that makes nothing new durable), "?" if threads
// differ. existed holds the paths there before the calls. (SQLite syncs the
// directory at the first sync of every -wal it opens, after it opened the
// -shm; the state file after it creates a lock file and after each rename.)
func fiDirSyncs(calls []faultinj.Call, targets []fiTarget, existed map[string]bool) map[string]string {
	lastAny, lastDurable := map[int]string{}, map[int]string{}
	made := func(tid int, name string) {
		lastAny[tid] = name
		if i := slices.IndexFunc(targets, func(tg fiTarget) bool { return tg.name == name }); i >= 0 && targets[i].durable {
			lastDurable[tid] = name
		}
	}
	index := map[string]int{}
	out := map[string]string{}
	for _, c := range calls {
		name := fiTargetOf(c, targets)
		switch {
		case strings.HasPrefix(c.Syscall, "rename") && len(c.Paths) > 0:
			existed[c.Paths[len(c.Paths)-1]] = true
			made(c.TID, fiTargetOf(faultinj.Call{Paths: c.Paths[len(c.Paths)-1:]}, targets))
		case strings.HasPrefix(c.Syscall, "unlink") && c.Ret == "0":
			for _, p := range c.Paths {
				delete(existed, p)
			}
		case name != "dir" && name != "" && strings.HasPrefix(c.Syscall, "open") && strings.Contains(c.Args, "O_CREAT") && !strings.HasPrefix(c.Ret, "-1"):
			for _, p := range c.Paths {
				if tn := fiTargetOf(faultinj.Call{Paths: []string{p}}, targets); tn == name && !existed[p] {
					existed[p] = true
					made(c.TID, name)
				}
			}
		case name == "dir" && (strings.HasPrefix(c.Syscall, "open") || strings.Contains(c.Syscall, "sync")):
			v := lastDurable[c.TID]
			if v == "" {
				v = lastAny[c.TID]
			}
			if v == "" {
				v = "-"
			}
			k := fmt.Sprintf("%s#%d", c.Syscall, index[fmt.Sprint(c.TID, c.Syscall)]+1)
			index[fmt.Sprint(c.TID, c.Syscall)]++
			if prev, ok := out[k]; ok && prev != v {
				out[k] = "?"
			} else {
				out[k] = v
			}
			if strings.Contains(c.Syscall, "sync") {
				delete(lastDurable, c.TID)
				delete(lastAny, c.TID)
			}
		}
	}
	return out
}

func fiRunCase(t *testing.T, c *fiCase, tmpl map[string][]byte) {
	dir := fiPrepare(t, c.op, tmpl)
	targets := fiTargets(c.op, dir)
	var paths []string
	for _, tg := range targets {
		if tg.name == c.target && !tg.temp {
			paths = []string{tg.path}
		}
	}
	res, calls, out, err := fiStrace(c.op, dir, []string{c.inj.Syscall}, paths, &c.inj)
	c.res = res
	for _, call := range calls {
		if call.Injected {
			c.fired = append(c.fired, call)
			c.hit = c.hit || fiTargetOf(call, targets) == c.target
			if res != nil && call.Time.Before(time.UnixMicro(res.Returned)) && fiRelevant(call, targets, c.syncs) {
				c.firedBefore = true
			}
		}
	}
	if err != nil {
		c.died = fmt.Sprintf("%v\n%s", err, out)
	}
	if len(c.fired) == 0 {
		return // the run took another path: nothing failed
	}
	if res != nil && res.OK && c.firedBefore {
		c.falseSuccess = fmt.Sprintf("reported success after %v", c.fired)
	}
	c.inconsistent, c.notCompleted = fiCheck(c.op, dir, res != nil && res.OK, &c.falseSuccess)
}

// fiCheck opens the store in dir cleanly: it must be consistent, hold the
// period done if the child reported success, and the next run of op must
// complete the period as its mode promises.
func fiCheck(op, dir string, reported bool, falseSuccess *string) (inconsistent, notCompleted string) {
	ctx, cancel := context.WithTimeout(context.Background(), fiChildLimit/2)
	defer cancel()
	s, err := fiOpen(op, dir)
	if err != nil {
		return "open: " + err.Error(), ""
	}
	defer s.(closer).Close()
	if l, ok := s.(*idem.Ledger); ok {
		var check string
		if err := l.DB().QueryRowContext(ctx, `PRAGMA integrity_check`).Scan(&check); err != nil || check != "ok" {
			return fmt.Sprintf("integrity_check: %q, %v", check, err), ""
		}
	}
	done := func() (string, error) {
		if op == "relayonce" {
			msgs, err := s.(*idem.Ledger).ListOutbox(ctx, idemstore.OutboxFilter{Topic: "faultinj-queue"})
			if err != nil || len(msgs) != 1 {
				return "", fmt.Errorf("the queued message: %v, %v", msgs, err)
			}
			return string(msgs[0].Status), nil
		}
		rec, found, err := s.(interface {
			Lookup(context.Context, idem.Key) (idem.Record, bool, error)
		}).Lookup(ctx, fiKey)
		if err != nil {
			return "", err
		}
		if !found {
			return "none", nil
		}
		return string(rec.Status), nil
	}
	want := string(idem.StatusDone)
	if op == "relayonce" {
		want = string(idemstore.OutboxDelivered)
	}
	st, err := done()
	if err != nil {
		return "lookup: " + err.Error(), ""
	}
	if reported && st != want && *falseSuccess == "" {
		*falseSuccess = fmt.Sprintf("reported success, the store says %s", st)
	}
	srv := fiReceiver()
	defer srv.Close()
	_, err = fiDo(ctx, op, dir, s, srv.URL)
	st2, lerr := done()
	// A relay that died holding the message leaves it until its claim
	// expires: the next passes deliver it then.
	for deadline := time.Now().Add(3 * fiRelayLease); op == "relayonce" && err == nil && lerr == nil && st2 != want && time.Now().Before(deadline); {
		time.Sleep(fiRelayLease / 10)
		_, err = fiDo(ctx, op, dir, s, srv.URL)
		st2, lerr = done()
	}
	switch {
	case lerr != nil:
		return "lookup after the next run: " + lerr.Error(), ""
	case op == "atmostonce" && errors.Is(err, idem.ErrUnknownOutcome):
		// AtMostOnce leaves a period it cannot tell unknown, for a person.
	case err != nil || st2 != want:
		notCompleted = fmt.Sprintf("the next run: %v; the store says %s", err, st2)
	}
	if (op == "atmostonce" || op == "twophase") && fiEffects(dir) > 1 {
		notCompleted += fmt.Sprintf("; fn ran %d times", fiEffects(dir))
	}
	if op == "runtx-outbox" {
		msgs, err := s.(*idem.Ledger).ListOutbox(ctx, idemstore.OutboxFilter{Topic: "faultinj"})
		if err != nil || len(msgs) != 1 {
			notCompleted += fmt.Sprintf("; %d messages of the RunTx (%v), want 1", len(msgs), err)
		}
	}
	return "", notCompleted
}

// fiSummary logs a line per operation, target and call, and fails the test
// for every violation.
func fiSummary(t *testing.T, cases []fiCase) {
	t.Helper()
	type agg struct{ runs, hit, reportedOK, falseOK, inconsistent, incomplete, died int }
	sums := map[string]*agg{}
	var keys []string
	for i := range cases {
		c := &cases[i]
		k := fmt.Sprintf("%s %s %s %s", c.op, c.target, c.inj.Syscall, c.inj.Errno)
		a := sums[k]
		if a == nil {
			a = &agg{}
			sums[k] = a
			keys = append(keys, k)
		}
		a.runs++
		if c.hit {
			a.hit++
		}
		if c.res != nil && c.res.OK {
			a.reportedOK++
		}
		if c.died != "" {
			a.died++
			t.Logf("%s: the child gave no result: %s", c.name(), c.died)
		}
		if c.falseSuccess != "" {
			a.falseOK++
			t.Errorf("FALSE SUCCESS %s: %s", c.name(), c.falseSuccess)
		}
		if c.inconsistent != "" {
			a.inconsistent++
			t.Errorf("INCONSISTENT %s: %s (child: %+v)", c.name(), c.inconsistent, c.res)
		}
		if c.notCompleted != "" {
			a.incomplete++
			t.Errorf("NOT COMPLETED %s: %s (child: %+v)", c.name(), c.notCompleted, c.res)
		}
	}
	sort.Strings(keys)
	var b strings.Builder
	fmt.Fprintf(&b, "%-42s %5s %5s %5s %6s %6s %6s %5s\n", "op target syscall errno", "runs", "hit", "ok", "false", "incons", "incomp", "died")
	for _, k := range keys {
		a := sums[k]
		fmt.Fprintf(&b, "%-42s %5d %5d %5d %6d %6d %6d %5d\n", k, a.runs, a.hit, a.reportedOK, a.falseOK, a.inconsistent, a.incomplete, a.died)
	}
	t.Logf("per operation, target, call and error:\n%s", b.String())
}
