//go:build unix

package idem

import "github.com/google/renameio/v2"

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
