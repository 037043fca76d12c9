package idem

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/idemgo/idem/internal/statefmt"
)

// stateFileVersion is the version of the state file format that this
// version of idem writes. A newer file is refused as corrupt; an older one
// is read, and written back in this version. Version 2 added the
// fingerprints ([WithParams]) and the value of the last done period
// ([RunValue]): fields a version-1 file does not have, read as none.
const stateFileVersion = statefmt.Version

// ErrCorruptState: a state file is empty, truncated, not JSON, of the wrong
// shape, or from a newer version of idem. It is never overwritten or reset
// automatically; see [RepairStateFile].
var ErrCorruptState = errors.New("idem: corrupt state file")

// stateDoc is the file's content; jobState is one job's watermark and
// pending attempt (internal/statefmt, which has the decoder and its fuzz
// test).
type (
	stateDoc = statefmt.Doc
	jobState = statefmt.Job
)

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

// decodeState parses and checks a state file's content (statefmt.Decode);
// every error it returns is a *CorruptStateError naming path.
func decodeState(path string, b []byte) (*stateDoc, error) {
	doc, err := statefmt.Decode(b)
	if err != nil {
		return nil, &CorruptStateError{Path: path, Reason: err.Error()}
	}
	return doc, nil
}

// stateCache is what the state file held when this store last read it,
// and its decoding (doc, nil until a read decodes it). It is only a way to
// skip a decode: every read still reads the whole file, and uses doc only
// if the bytes it read are these, byte for byte, so that no change to the
// file (another process's write, an edit by hand, in place or by a new
// file, of any size and at any time) can be missed.
type stateCache struct {
	raw []byte
	doc *stateDoc // decodeState(raw), never modified
}

// read reads and decodes the file, or returns an empty document if it does
// not exist. The document is the caller's to modify. A file whose content
// is that of the last read or write of this store is not decoded again.
func (s *StateFile) read() (*stateDoc, error) {
	b, err := readRegular(s.path)
	if errors.Is(err, os.ErrNotExist) {
		return &stateDoc{Version: stateFileVersion, Jobs: map[string]*jobState{}}, nil
	}
	var pe *os.PathError
	if errors.As(err, &pe) {
		return nil, fmt.Errorf("idem: state file %s: %w", s.path, err)
	}
	if err != nil {
		return nil, err
	}
	if c := s.cache.Load(); c != nil && c.doc != nil && bytes.Equal(c.raw, b) {
		return cloneDoc(c.doc), nil
	}
	doc, err := decodeState(s.path, b)
	if err != nil {
		return nil, err
	}
	s.cache.Store(&stateCache{raw: b, doc: cloneDoc(doc)})
	return doc, nil
}

// cloneDoc copies d deeply: the copy shares nothing that can be modified
// with d.
func cloneDoc(d *stateDoc) *stateDoc {
	c := &stateDoc{Version: d.Version, Jobs: make(map[string]*jobState, len(d.Jobs))}
	for job, st := range d.Jobs {
		j := *st
		j.DoneValue = bytes.Clone(st.DoneValue)
		c.Jobs[job] = &j
	}
	return c
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
	doc := &stateDoc{Version: stateFileVersion, Jobs: map[string]*jobState{}}
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
	defer s.Close()
	s.mu.Lock()
	defer s.mu.Unlock()
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
