//go:build unix

package idem

import (
	"fmt"
	"os"

	"github.com/google/renameio/v2"
)

// newPendingFile returns renameio's temp file for path, created in dir with
// mode 0644 (less the umask); its CloseAtomicallyReplace is fsync + close +
// rename(2). The caller fsyncs dir after the rename.
func newPendingFile(path, dir string) (pendingFile, error) {
	t, err := renameio.NewPendingFile(path, renameio.WithTempDir(dir), renameio.WithPermissions(0o644))
	if err != nil {
		return nil, err
	}
	return t, nil
}

// syncDir fsyncs the state file's directory, making a rename in it
// durable. The directory stays open for the next write, until Close; an
// fsync counts only while the directory's path still names it (stillAt),
// else the directory at the path is opened anew and fsynced.
func (s *StateFile) syncDir() error {
	if k := s.dirFile; k != nil && !k.stillAt() {
		k.f.Close()
		s.dirFile = nil
	}
	if s.dirFile == nil {
		d, err := os.Open(s.dir)
		if err != nil {
			return err
		}
		if s.dirFile, err = keep(d); err != nil {
			return err
		}
	}
	if err := s.dirFile.f.Sync(); err != nil {
		return fmt.Errorf("fsync directory %s: %w", s.dir, err)
	}
	return nil
}
