package idem

import (
	"context"
	"encoding/json"
	"fmt"
	"io"

	"github.com/idemgo/idem/idemstore"
)

// pendingFile is a temp file in the state file's directory that replaces
// the state file: Write, then CloseAtomicallyReplace (fsync the temp file,
// close it, rename it over the state file), or Cleanup (close and remove
// it; nothing after a successful replace). newPendingFile makes one:
// renameio's on Unix (statefile_write_unix.go), MoveFileEx on Windows
// (statefile_write_windows.go).
type pendingFile interface {
	io.Writer
	CloseAtomicallyReplace() error
	Cleanup() error
}

// write replaces the file atomically and durably. key names the run for
// crash points.
func (s *StateFile) write(ctx context.Context, key Key, doc *stateDoc) error {
	if s.broken != nil {
		return s.broken
	}
	doc.Version = stateFileVersion // a file read in an older version is written in this one
	b, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return err
	}
	b = append(b, '\n')
	t, err := newPendingFile(s.path, s.dir)
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
	if err := idemstore.Checkpoint(ctx, idemstore.MidWrite, key); err != nil {
		crashed = true
		return err
	}
	// fsync the temp file, then rename it over the state file. A failure
	// here may be a failed fsync, after which the kernel's view of the data
	// is unknown: it is fatal, never retried.
	if err := t.CloseAtomicallyReplace(); err != nil {
		s.broken = idemstore.Fatal(fmt.Errorf("idem: state file %s: fsync or rename failed, refusing further writes: %w", s.path, err))
		return s.broken
	}
	if err := idemstore.Checkpoint(ctx, idemstore.AfterRename, key); err != nil {
		crashed = true
		return err
	}
	if err := s.syncDir(); err != nil {
		s.broken = idemstore.Fatal(fmt.Errorf("idem: state file %s: directory fsync failed, refusing further writes: %w", s.path, err))
		return s.broken
	}
	return nil
}
