package idem

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/google/renameio/v2"
)

// StateFileVersion is the version of the state file format that this
// version of idem writes. A newer file is refused as corrupt.
const StateFileVersion = 1

// ErrCorruptState: a state file is empty, truncated, not JSON, of the wrong
// shape, or from a newer version of idem. It is never overwritten or reset
// automatically; see [RepairStateFile].
var ErrCorruptState = errors.New("idem: corrupt state file")

// ErrOutOfOrder: a state file keeps one watermark per job, so a job's
// periods must be done in order, one at a time, and must sort in time order
// as strings.
var ErrOutOfOrder = errors.New("idem: state file: period out of order")

// StateFile is a [Store] in one JSON file, for jobs with no database: a
// daily report mail, an IM push. Per job it keeps the seeds' watermark
// ({"lastDonePeriod", "status", "pendingPeriod"}) plus what the modes need.
//
// The file is a WATERMARK: a period at or before the job's last done period
// counts as done. So a job's periods must sort in time order as strings
// (zero-padded, like "2026-10-27"; [Daily] and friends name them so) and are
// done in order: while one period is pending (running, failed, unknown or
// parked), another period of the job waits ([ErrOutOfOrder]). Backfilling a
// period older than the watermark is not possible here; use a [Ledger].
//
// Every write is atomic and durable: a temp file in the same directory,
// fsync, rename over the file, fsync of the directory. A failed fsync is
// fatal: the store refuses every later write, since the kernel may have
// dropped the data it failed to write.
//
// Mutual exclusion is a flock on a sidecar lock file per job
// (path + ".<hash>.lock"), held while an attempt runs and released by the
// kernel when its process dies; every read-modify-write of the file also
// holds a file-wide flock (path + ".lock"). It works between processes of ONE host,
// not across hosts (network filesystems do not honour flock reliably).
//
// The lock never expires while its holder lives: a stalled holder is never
// taken over, and every other Run of the job finds it in progress
// ([ErrInProgress]) until the attempt ends or its process dies (the kernel
// then releases the lock at once). [WithLease] still sets how long a stall
// may last before [CheckLease] refuses: an attempt whose heartbeat has not
// renewed for the lease (a long GC pause, a frozen VM) gets ErrLeaseLost
// from CheckLease, as on a ledger, although nobody took its lock. Its done
// mark is still written if fn returns nil. It does NOT promise anything
// across hosts, nor that a stalled holder stops by itself.
//
// Modes: an AtLeastOnce claim writes nothing to the state file (the lock is
// enough, and a crash only means fn runs again), so a fresh Run costs one
// durable write. AtMostOnce and TwoPhase write the pending mark durably
// before fn runs. Every claim records its attempt number in the job's lock
// file (not synced), so that attempt numbers never repeat, even after a
// process died between a claim and its end; after a power loss an
// AtLeastOnce attempt number may repeat.
type StateFile struct {
	path     string
	dir      string
	defaults []Option

	mu     sync.Mutex // serializes read-modify-write in this process
	held   map[string]*heldLock
	broken error // a failed fsync: no more writes
}

type heldLock struct {
	f       *os.File
	period  string
	attempt int64
}

var (
	_ CatchUpStore = (*StateFile)(nil)
	_ Lister       = (*StateFile)(nil)
)

// stateDoc is the file's content.
type stateDoc struct {
	Version int                  `json:"version"`
	Jobs    map[string]*jobState `json:"jobs"`
}

// jobState is one job's watermark and pending attempt.
type jobState struct {
	LastDonePeriod string    `json:"lastDonePeriod"`
	Status         Status    `json:"status"` // status of PendingPeriod, or "done"
	PendingPeriod  string    `json:"pendingPeriod"`
	Attempt        int64     `json:"attempt"`
	Failures       int       `json:"failures"`
	Owner          string    `json:"owner,omitempty"`
	NotBefore      time.Time `json:"notBefore,omitzero"`
	LastError      string    `json:"lastError,omitempty"`
	Updated        time.Time `json:"updated,omitzero"`
}

// OpenStateFile returns the state file store at path. The directory must
// exist; the file is created on the first write. An existing file is read
// and checked at once: a corrupt one is reported ([ErrCorruptState]) with
// its path and left untouched. opts become defaults for every Run.
//
// The file must be a regular file: a directory, a named pipe, a socket or
// a device is refused (without opening it, so a FIFO cannot block).
//
// A path that is a symbolic link is followed, once, here: the store reads,
// writes and locks the link's target (its temp files, its lock files and
// the directory it fsyncs are those of the target's directory), so the
// link stays a link and the target gets every update. The target must
// exist; a dangling link is refused. Re-pointing the link while a store
// is open is not noticed: the open store keeps using the old target while
// a store opened afterwards uses the new one, and the two do not exclude
// each other (their locks lie beside different files). Re-point a link
// only while no process has the state file open.
func OpenStateFile(path string, opts ...Option) (*StateFile, error) {
	if path == "" {
		return nil, errors.New("idem: state file path is empty")
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	dir := filepath.Dir(abs)
	if fi, err := os.Stat(dir); err != nil {
		return nil, fmt.Errorf("idem: state file %s: directory: %w", abs, err)
	} else if !fi.IsDir() {
		return nil, fmt.Errorf("idem: state file %s: %s is not a directory", abs, dir)
	}
	if abs, err = resolveStateFile(abs); err != nil {
		return nil, err
	}
	s := &StateFile{path: abs, dir: filepath.Dir(abs), defaults: opts, held: map[string]*heldLock{}}
	if _, err := s.read(); err != nil {
		return nil, err
	}
	return s, nil
}

// resolveStateFile follows abs if it is a symbolic link and checks that
// what it names is a regular file or does not exist yet. It returns the
// path to use: abs, or the link's target.
func resolveStateFile(abs string) (string, error) {
	fi, err := os.Lstat(abs)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return abs, nil
	case err != nil:
		return "", fmt.Errorf("idem: state file %s: %w", abs, err)
	case fi.Mode()&os.ModeSymlink != 0:
		dest, _ := os.Readlink(abs)
		target, err := filepath.EvalSymlinks(abs)
		if errors.Is(err, os.ErrNotExist) {
			return "", fmt.Errorf("idem: state file %s: a symbolic link to %s, which does not exist (create the target, or remove the link)", abs, dest)
		}
		if err != nil {
			return "", fmt.Errorf("idem: state file %s: a symbolic link to %s that cannot be followed: %w", abs, dest, err)
		}
		if target, err = filepath.Abs(target); err != nil {
			return "", err
		}
		if fi, err = os.Stat(target); err != nil {
			return "", fmt.Errorf("idem: state file %s (a symbolic link to %s): %w", abs, target, err)
		}
		if err := regularFile(target, fi); err != nil {
			return "", fmt.Errorf("%w (the target of the symbolic link %s)", err, abs)
		}
		return target, nil
	}
	return abs, regularFile(abs, fi)
}

// regularFile refuses a state file that is not a regular file.
func regularFile(path string, fi os.FileInfo) error {
	switch m := fi.Mode(); {
	case m.IsRegular():
		return nil
	case m.IsDir():
		return fmt.Errorf("idem: state file %s: is a directory", path)
	default:
		return fmt.Errorf("idem: state file %s: is %s, not a regular file (left untouched)", path, fileKind(m))
	}
}

// fileKind names what a file that is not a regular file or a directory is.
func fileKind(m os.FileMode) string {
	switch {
	case m&os.ModeNamedPipe != 0:
		return "a named pipe (FIFO)"
	case m&os.ModeSocket != 0:
		return "a socket"
	case m&os.ModeCharDevice != 0:
		return "a character device"
	case m&os.ModeDevice != 0:
		return "a block device"
	}
	return "of type " + m.Type().String()
}

// readRegular reads the file at path, refusing anything but a regular file
// without blocking (a FIFO put in the file's place is opened non-blocking
// and refused, never read).
func readRegular(path string) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if err := regularFile(path, fi); err != nil {
		return nil, err
	}
	return io.ReadAll(f)
}

// Path returns the state file's path: the target's, if the path given to
// OpenStateFile was a symbolic link.
func (s *StateFile) Path() string { return s.path }

// Run runs fn for key with the protocol of [RunWith].
func (s *StateFile) Run(ctx context.Context, key Key, fn func(context.Context) error, opts ...Option) error {
	return RunWith(ctx, s, key, fn, opts...)
}

// DefaultOptions returns the options given to OpenStateFile: the defaults
// of every Run and CatchUp on the store.
func (s *StateFile) DefaultOptions() []Option { return s.defaults }

// CorruptStateError reports a state file that cannot be used. It matches
// ErrCorruptState.
type CorruptStateError struct {
	Path   string
	Reason string
}

func (e *CorruptStateError) Error() string {
	return fmt.Sprintf("idem: corrupt state file %s: %s (left untouched; see idem.RepairStateFile)", e.Path, e.Reason)
}

// Is reports whether target is ErrCorruptState.
func (e *CorruptStateError) Is(target error) bool { return target == ErrCorruptState }

// decodeState parses and checks a state file's content.
func decodeState(path string, b []byte) (*stateDoc, error) {
	bad := func(format string, a ...any) error {
		return &CorruptStateError{Path: path, Reason: fmt.Sprintf(format, a...)}
	}
	if len(bytes.TrimSpace(b)) == 0 {
		return nil, bad("the file is empty")
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var doc stateDoc
	if err := dec.Decode(&doc); err != nil {
		return nil, bad("%v", err)
	}
	if dec.More() {
		return nil, bad("data after the JSON document")
	}
	switch {
	case doc.Version > StateFileVersion:
		return nil, bad("version %d is newer than this idem's %d", doc.Version, StateFileVersion)
	case doc.Version < 1:
		return nil, bad("no version")
	case doc.Jobs == nil:
		return nil, bad(`no "jobs" object`)
	}
	for job, st := range doc.Jobs {
		if err := validPart("job", job); err != nil {
			return nil, bad("job %s: %v", quotePart(job), err)
		}
		if st == nil {
			return nil, bad("job %q: null", job)
		}
		switch {
		case st.Attempt < 0 || st.Failures < 0:
			return nil, bad("job %q: negative attempt or failures", job)
		case st.LastDonePeriod != "" && validPart("period", st.LastDonePeriod) != nil:
			return nil, bad("job %q: invalid lastDonePeriod", job)
		case st.PendingPeriod != "" && validPart("period", st.PendingPeriod) != nil:
			return nil, bad("job %q: invalid pendingPeriod", job)
		}
		switch st.Status {
		case StatusDone:
			if st.PendingPeriod != "" || st.LastDonePeriod == "" {
				return nil, bad("job %q: status done needs lastDonePeriod and no pendingPeriod", job)
			}
		case StatusRunning, StatusFailed, StatusUnknown, StatusParked:
			if st.PendingPeriod == "" || st.PendingPeriod <= st.LastDonePeriod {
				return nil, bad("job %q: status %s needs a pendingPeriod after lastDonePeriod", job, st.Status)
			}
		default:
			return nil, bad("job %q: unknown status %q", job, st.Status)
		}
	}
	return &doc, nil
}

func (s *StateFile) read() (*stateDoc, error) {
	b, err := readRegular(s.path)
	if errors.Is(err, os.ErrNotExist) {
		return &stateDoc{Version: StateFileVersion, Jobs: map[string]*jobState{}}, nil
	}
	var pe *os.PathError
	if errors.As(err, &pe) {
		return nil, fmt.Errorf("idem: state file %s: %w", s.path, err)
	}
	if err != nil {
		return nil, err
	}
	return decodeState(s.path, b)
}

// write replaces the file atomically and durably. key names the run for
// crash points.
func (s *StateFile) write(ctx context.Context, key Key, doc *stateDoc) error {
	if s.broken != nil {
		return s.broken
	}
	b, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return err
	}
	b = append(b, '\n')
	t, err := renameio.NewPendingFile(s.path, renameio.WithTempDir(s.dir), renameio.WithPermissions(0o644))
	if err != nil {
		return s.createErr(s.path, err)
	}
	crashed := false
	defer func() {
		if !crashed { // a crash leaves its temp file behind, as a real one would
			t.Cleanup()
		}
	}()
	if _, err := t.Write(b); err != nil {
		return fmt.Errorf("idem: state file %s: %w", s.path, err)
	}
	if err := Checkpoint(ctx, MidWrite, key); err != nil {
		crashed = true
		return err
	}
	// fsync the temp file, then rename it over the state file. A failure
	// here may be a failed fsync, after which the kernel's view of the data
	// is unknown: it is fatal, never retried.
	if err := t.CloseAtomicallyReplace(); err != nil {
		s.broken = &fatalError{fmt.Errorf("idem: state file %s: fsync or rename failed, refusing further writes: %w", s.path, err)}
		return s.broken
	}
	if err := Checkpoint(ctx, AfterRename, key); err != nil {
		crashed = true
		return err
	}
	if err := syncDir(s.dir); err != nil {
		s.broken = &fatalError{fmt.Errorf("idem: state file %s: directory fsync failed, refusing further writes: %w", s.path, err)}
		return s.broken
	}
	return nil
}

// createErr reports a file (the state file's temp file, or a lock file at
// p) that could not be created, saying so plainly when the directory cannot
// be written.
func (s *StateFile) createErr(p string, err error) error {
	what := "state file " + s.path
	if p != s.path {
		what = "state file lock " + p
	}
	if msg := unwritableDir(s.dir); msg != "" && (errors.Is(err, fs.ErrPermission) || errors.Is(err, syscall.EROFS)) {
		return fmt.Errorf("idem: %s: cannot write: %s: %w", what, msg, err)
	}
	return fmt.Errorf("idem: %s: %w", what, err)
}

// lockPath is the sidecar lock file of job.
func (s *StateFile) lockPath(job string) string {
	h := sha256.Sum256([]byte(job))
	return s.path + "." + hex.EncodeToString(h[:6]) + ".lock"
}

// tryLock takes job's lock without waiting; ok is false if another holder
// (process or goroutine) has it.
func (s *StateFile) tryLock(job string) (f *os.File, ok bool, err error) {
	p := s.lockPath(job)
	_, statErr := os.Stat(p)
	f, err = os.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, false, s.createErr(p, err)
	}
	if errors.Is(statErr, os.ErrNotExist) {
		if err := syncDir(s.dir); err != nil {
			f.Close()
			return nil, false, err
		}
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, false, nil
		}
		return nil, false, fmt.Errorf("idem: state file lock %s: %w", p, err)
	}
	return f, true, nil
}

// unlockClose releases the flock held on f and closes f. The explicit unlock
// matters: a lock goes with the open file description, which a child this
// process forks at that moment shares until its exec closes the copies of
// every descriptor (os/exec in another goroutine): closing f alone would
// leave the lock held that long.
func unlockClose(f *os.File) {
	_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	f.Close()
}

// attemptMarkLen is the size of the attempt number a job's lock file keeps:
// 20 digits and a newline.
const attemptMarkLen = 21

// lastClaimed reads the last attempt number claimed for the job whose lock
// file f is (held): 0 for a lock file that has none (a new one, or one an
// older idem left empty).
func lastClaimed(f *os.File) (int64, error) {
	var b [attemptMarkLen]byte
	n, err := f.ReadAt(b[:], 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return 0, err
	}
	v, perr := strconv.ParseInt(strings.TrimSpace(string(b[:n])), 10, 64)
	if perr != nil || v < 0 {
		return 0, nil
	}
	return v, nil
}

// markClaimed records attempt as the last claimed in the held lock file f.
// It is not synced: it survives the death of the process (what reuses an
// attempt number without it), not a power loss.
func markClaimed(f *os.File, attempt int64) error {
	_, err := f.WriteAt([]byte(fmt.Sprintf("%20d\n", attempt)), 0)
	return err
}

// lockFile takes the file-wide lock (a flock on path + ".lock") that
// serializes every read-modify-write of the state file between processes;
// s.mu does it between goroutines and must be held first. Every write
// re-reads the file under it: the file holds all jobs, and a write based on
// a stale read would undo another job's change.
func (s *StateFile) lockFile() (unlock func(), err error) {
	p := s.path + ".lock"
	_, statErr := os.Stat(p)
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, s.createErr(p, err)
	}
	if errors.Is(statErr, os.ErrNotExist) {
		if err := syncDir(s.dir); err != nil {
			f.Close()
			return nil, err
		}
	}
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("idem: state file lock %s: %w", p, err)
	}
	return func() { unlockClose(f) }, nil
}

// readLocked takes the file-wide lock and reads the file under it; the
// caller writes (if at all) and then calls unlock.
func (s *StateFile) readLocked() (doc *stateDoc, unlock func(), err error) {
	if unlock, err = s.lockFile(); err != nil {
		return nil, nil, err
	}
	if doc, err = s.read(); err != nil {
		unlock()
		return nil, nil, err
	}
	return doc, unlock, nil
}

// periodShape is a period's pattern of digits: periods of one job must
// share it, so that string order is time order ("2026-9-30" would sort
// after "2026-10-01").
func periodShape(p string) string {
	b := []byte(p)
	for i, c := range b {
		if c >= '0' && c <= '9' {
			b[i] = '9'
		}
	}
	return string(b)
}

func checkShape(st *jobState, key Key) error {
	ref := st.LastDonePeriod
	if ref == "" {
		ref = st.PendingPeriod
	}
	if ref != "" && periodShape(ref) != periodShape(key.Period) {
		return fmt.Errorf("%w: period %q of job %q is not of the shape of %q; a job's periods must sort in time order as strings (zero-padded, like 2026-10-27)",
			ErrOutOfOrder, key.Period, key.Job, ref)
	}
	return nil
}

// record is what the file says of key.
func (st *jobState) record(key Key) (Record, bool) {
	if st == nil {
		return Record{Key: key}, false
	}
	r := Record{Key: key, Attempt: st.Attempt, Failures: st.Failures, Owner: st.Owner,
		NotBefore: st.NotBefore, LastError: st.LastError, Updated: st.Updated}
	switch {
	case key.Period <= st.LastDonePeriod:
		r.Status, r.Failures, r.NotBefore, r.LastError = StatusDone, 0, time.Time{}, ""
		if key.Period != st.LastDonePeriod {
			r.Attempt = 0 // done by the watermark; its own attempts are not kept
		}
		return r, true
	case key.Period == st.PendingPeriod:
		r.Status = st.Status
		return r, true
	}
	return Record{Key: key}, false
}

// Lookup implements [Store].
func (s *StateFile) Lookup(ctx context.Context, key Key) (Record, bool, error) {
	if err := key.Validate(); err != nil {
		return Record{}, false, err
	}
	doc, err := s.read()
	if err != nil {
		return Record{}, false, err
	}
	rec, ok := doc.Jobs[key.Job].record(key)
	return rec, ok, nil
}

// Claim implements [Store]. The claim holds the job's lock until Finish.
func (s *StateFile) Claim(ctx context.Context, req ClaimRequest) (Claim, error) {
	key := req.Key
	// Fast path: no lock, no write for a done period.
	doc, err := s.read()
	if err != nil {
		return Claim{}, err
	}
	if rec, ok := doc.Jobs[key.Job].record(key); ok && rec.Status == StatusDone {
		return Claim{State: ClaimDone, Record: rec}, nil
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	f, ok, err := s.tryLock(key.Job)
	if err != nil {
		return Claim{}, err
	}
	if !ok {
		rec, _ := doc.Jobs[key.Job].record(key)
		rec.Status = StatusRunning
		return Claim{State: ClaimBusy, Record: rec}, nil
	}
	keep := false
	defer func() {
		if !keep {
			unlockClose(f)
		}
	}()
	// Under the locks, read again: the last holder may have just finished.
	doc, unlock, err := s.readLocked()
	if err != nil {
		return Claim{}, err
	}
	defer unlock()
	st := doc.Jobs[key.Job]
	if st == nil {
		st = &jobState{Status: StatusDone}
	} else if err := checkShape(st, key); err != nil {
		return Claim{}, err
	}
	rec, found := st.record(key)
	if !found && st.PendingPeriod != "" {
		return Claim{}, fmt.Errorf("%w: %s: period %s of job %q is %s (%s); it must be done, resolved or reset first",
			ErrOutOfOrder, key, st.PendingPeriod, key.Job, st.Status, st.LastError)
	}
	state, take, doubt := decide(rec, found, req)
	if rec.Status == StatusRunning {
		// We hold the lock, so its holder is gone: the attempt died.
		state, take, doubt = ClaimAcquired, true, true
	}
	c := Claim{State: state, Record: rec}
	if !take {
		return c, nil
	}
	// The attempt number must be new even when the claim writes nothing
	// (AtLeastOnce) and an earlier claim died before its end was written:
	// the job's lock file keeps the last number claimed.
	last, err := lastClaimed(f)
	if err != nil {
		return Claim{}, fmt.Errorf("idem: state file lock %s: %w", f.Name(), err)
	}
	c.Attempt, c.Doubt = max(st.Attempt, last)+1, doubt
	if err := markClaimed(f, c.Attempt); err != nil {
		return Claim{}, fmt.Errorf("idem: state file lock %s: %w", f.Name(), err)
	}
	if doubt && rec.Status == StatusRunning {
		c.Record.Failures++
		c.Record.LastError = fmt.Sprintf("attempt %d by %s died without a done mark", rec.Attempt, rec.Owner)
	}
	if req.Durable || doubt {
		next := *st
		next.Status, next.PendingPeriod, next.Attempt, next.Owner = StatusRunning, key.Period, c.Attempt, req.Owner
		next.Failures, next.LastError, next.NotBefore, next.Updated = c.Record.Failures, c.Record.LastError, time.Time{}, req.Now
		doc.Jobs[key.Job] = &next
		if err := s.write(ctx, key, doc); err != nil {
			return Claim{}, err // the lock is released, as on a crash
		}
	}
	keep = true
	s.held[key.Job] = &heldLock{f: f, period: key.Period, attempt: c.Attempt}
	return c, nil
}

// holder returns the lock this process holds for key's attempt.
func (s *StateFile) holder(key Key, attempt int64) (*heldLock, error) {
	h := s.held[key.Job]
	if h == nil || h.period != key.Period || h.attempt != attempt {
		return nil, fmt.Errorf("%w: %s attempt %d holds no lock here", ErrLeaseLost, key, attempt)
	}
	return h, nil
}

// Renew implements [Store]. The lock is the lease: renewing only checks
// that this process still holds it.
func (s *StateFile) Renew(ctx context.Context, key Key, attempt int64, now time.Time, lease time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, err := s.holder(key, attempt)
	return err
}

// Finish implements [Store]. It writes the attempt's end durably and
// releases the job's lock. If the write fails (a full disk), the file is as
// it was and the lock stays held, so that the end can be written again; Run
// retries it a few times, and when it gives up it releases the lock (the
// next Run then finds the attempt died).
func (s *StateFile) Finish(ctx context.Context, key Key, attempt int64, end End) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	h, err := s.holder(key, attempt)
	if err != nil {
		return err
	}
	doc, unlock, err := s.readLocked()
	if err != nil {
		return err
	}
	defer unlock()
	prev := doc.Jobs[key.Job]
	next := jobState{Status: StatusDone}
	if prev != nil {
		next = *prev
	}
	next.Attempt, next.Owner, next.Updated = attempt, h.owner(), end.Now
	if end.Status == StatusDone {
		next.Status, next.LastDonePeriod, next.PendingPeriod = StatusDone, key.Period, ""
		next.Failures, next.NotBefore, next.LastError = 0, time.Time{}, ""
	} else {
		next.Status, next.PendingPeriod = end.Status, key.Period
		next.Failures, next.NotBefore, next.LastError = end.Failures, end.NotBefore, end.Error
	}
	doc.Jobs[key.Job] = &next
	if err := s.write(ctx, key, doc); err != nil {
		return err
	}
	s.release(key.Job)
	return nil
}

func (h *heldLock) owner() string { return processOwner() }

func (s *StateFile) release(job string) {
	if h := s.held[job]; h != nil {
		unlockClose(h.f)
		delete(s.held, job)
	}
}

// abandon drops what this process holds for key's attempt without writing,
// as the kernel would when the process dies. Run calls it whenever an
// attempt ends without its end written: a crash point stopped the run, fn
// panicked, the lease was lost, or Finish kept failing.
func (s *StateFile) abandon(key Key, attempt int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if h := s.held[key.Job]; h != nil && h.period == key.Period && h.attempt == attempt {
		s.release(key.Job)
	}
}

// Resolve implements [Store]. ResolveDone moves the job's watermark to
// key.Period (every earlier period counts as done); ResolveRetry makes the
// pending period runnable at once. It refuses while an attempt holds the
// job's lock.
func (s *StateFile) Resolve(ctx context.Context, key Key, to Resolution) error {
	if err := key.Validate(); err != nil {
		return err
	}
	if to < ResolveDone || to > ResolveSkip {
		return fmt.Errorf("idem: unknown resolution %d", to)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	f, ok, err := s.tryLock(key.Job)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("%w: %s: an attempt holds the job's lock", ErrNotResolvable, key)
	}
	defer unlockClose(f)
	doc, unlock, err := s.readLocked()
	if err != nil {
		return err
	}
	defer unlock()
	st := doc.Jobs[key.Job]
	if st == nil {
		st = &jobState{Status: StatusDone}
	} else if err := checkShape(st, key); err != nil {
		return err
	}
	rec, found := st.record(key)
	if err := resolvable(rec, found, to, time.Now()); err != nil {
		return err
	}
	if st.PendingPeriod != "" && st.PendingPeriod != key.Period {
		return fmt.Errorf("%w: %s: period %s of the job is pending; resolve it first", ErrOutOfOrder, key, st.PendingPeriod)
	}
	next := *st
	status, note := resolution(rec, to)
	next.Updated, next.LastError, next.Failures, next.NotBefore = time.Now(), note, 0, time.Time{}
	if status == StatusDone || status == StatusSkipped { // a watermark cannot tell them apart
		next.Status, next.LastDonePeriod, next.PendingPeriod, next.LastError = StatusDone, key.Period, "", ""
	} else {
		next.Status = status
	}
	doc.Jobs[key.Job] = &next
	return s.write(ctx, key, doc)
}

// Job implements [CatchUpStore]: the job's watermark is both its cursor
// and its horizon.
func (s *StateFile) Job(ctx context.Context, job string) (JobState, error) {
	doc, err := s.read()
	if err != nil {
		return JobState{}, err
	}
	js := JobState{Job: job}
	if st := doc.Jobs[job]; st != nil {
		js.Cursor, js.Horizon = st.LastDonePeriod, st.LastDonePeriod
	}
	return js, nil
}

// Start implements [CatchUpStore]. The job's cursor is its watermark, so
// for a job that has neither a watermark nor a pending period it writes the
// watermark before, durably: from then on every period at or before it
// counts as done (a Run of one returns AlreadyDone without running it), as
// for any watermark; the job's periods begin after it. A job that has a
// watermark, or a pending period (left by a Run, or by an older idem), is
// left as it is; with a pending period and no watermark the cursor stays
// "", and catch-up waits for that period ([ErrOutOfOrder]) until it is
// done or resolved. Start refuses, with an error matching [ErrInProgress],
// while an attempt holds the job's lock (an at-least-once Run that has
// written nothing yet).
func (s *StateFile) Start(ctx context.Context, job, before string) (JobState, error) {
	key := Key{Job: job, Period: before}
	if err := key.Validate(); err != nil {
		return JobState{}, err
	}
	js, err := s.Job(ctx, job)
	if err != nil || js.Cursor != "" {
		return js, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	f, ok, err := s.tryLock(job)
	if err != nil {
		return JobState{}, err
	}
	if !ok {
		return JobState{}, fmt.Errorf("%w: %s: job %q: an attempt holds the job's lock; its catch-up can start once it ends",
			ErrInProgress, s.path, job)
	}
	defer unlockClose(f)
	doc, unlock, err := s.readLocked()
	if err != nil {
		return JobState{}, err
	}
	defer unlock()
	if st := doc.Jobs[job]; st != nil {
		return JobState{Job: job, Cursor: st.LastDonePeriod, Horizon: st.LastDonePeriod}, nil
	}
	doc.Jobs[job] = &jobState{LastDonePeriod: before, Status: StatusDone, Updated: newConfigFrom(s.defaults, nil).clock.Now()}
	if err := s.write(ctx, key, doc); err != nil {
		return JobState{}, err
	}
	return JobState{Job: job, Cursor: before, Horizon: before}, nil
}

// Advance implements [CatchUpStore]. The watermark moves only with done
// marks: advancing to a period at or before it does nothing, and past it is
// refused (it would mark the periods in between done).
func (s *StateFile) Advance(ctx context.Context, job, period string) error {
	js, err := s.Job(ctx, job)
	if err != nil {
		return err
	}
	if period <= js.Cursor {
		return nil
	}
	return fmt.Errorf("%w: %s: cannot move the watermark of job %q from %q to %q without a done mark",
		ErrOutOfOrder, s.path, job, js.Cursor, period)
}

// List implements [Lister]: one record per job, for its pending period if
// it has one, else its last done period.
func (s *StateFile) List(ctx context.Context, f Filter) ([]Record, error) {
	doc, err := s.read()
	if err != nil {
		return nil, err
	}
	jobs := make([]string, 0, len(doc.Jobs))
	for job := range doc.Jobs {
		jobs = append(jobs, job)
	}
	slices.Sort(jobs)
	var recs []Record
	for _, job := range jobs {
		st := doc.Jobs[job]
		period := st.PendingPeriod
		if period == "" {
			period = st.LastDonePeriod
		}
		rec, _ := st.record(Key{Job: job, Period: period})
		if (f.Job != "" && f.Job != job) || (f.Status != "" && f.Status != rec.Status) {
			continue
		}
		if f.Limit > 0 && len(recs) == f.Limit {
			break
		}
		recs = append(recs, rec)
	}
	return recs, nil
}

// Prune implements [CatchUpStore]. A state file keeps no per-period
// records, only the watermark, which is already its horizon: there is
// nothing to delete.
func (s *StateFile) Prune(ctx context.Context, job, through string) (int64, error) {
	return 0, (Key{Job: job, Period: through}).Validate()
}

// Reset un-parks the job's pending period: Resolve(ctx, key, ResolveRetry).
func (s *StateFile) Reset(ctx context.Context, key Key) error {
	return s.Resolve(ctx, key, ResolveRetry)
}

// RepairStateFile replaces a corrupt state file by a valid one whose
// watermarks are lastDone (job → last done period), which the operator
// establishes from logs or the downstream. The corrupt file is kept beside
// it, renamed to path + ".corrupt-<unix seconds>"; the new name is returned.
// It refuses to touch a file that is not corrupt.
func RepairStateFile(path string, lastDone map[string]string) (kept string, err error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", err
	}
	if abs, err = resolveStateFile(abs); err != nil {
		return "", err
	}
	b, err := readRegular(abs)
	var pe *os.PathError
	if errors.As(err, &pe) {
		return "", fmt.Errorf("idem: repair %s: %w", abs, err)
	}
	if err != nil {
		return "", err
	}
	if _, err := decodeState(abs, b); err == nil {
		return "", fmt.Errorf("idem: repair %s: the file is not corrupt; refusing to replace it", abs)
	}
	doc := &stateDoc{Version: StateFileVersion, Jobs: map[string]*jobState{}}
	for job, p := range lastDone {
		k := Key{Job: job, Period: p}
		if err := k.Validate(); err != nil {
			return "", err
		}
		doc.Jobs[job] = &jobState{LastDonePeriod: p, Status: StatusDone, Updated: time.Now()}
	}
	kept = fmt.Sprintf("%s.corrupt-%d", abs, time.Now().Unix())
	if err := os.Link(abs, kept); err != nil {
		return "", fmt.Errorf("idem: repair %s: keep the corrupt file: %w", abs, err)
	}
	s := &StateFile{path: abs, dir: filepath.Dir(abs)}
	unlock, err := s.lockFile()
	if err != nil {
		return "", err
	}
	defer unlock()
	if err := s.write(context.Background(), Key{}, doc); err != nil {
		return "", err
	}
	return kept, nil
}
