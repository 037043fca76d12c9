//go:build windows

package idem

import (
	"errors"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/windows"
)

// newPendingFile returns a temp file for path, created in dir and named as
// renameio names its own ("." + the file's name + random digits).
// renameio's PendingFile does not exist on Windows.
func newPendingFile(path, dir string) (pendingFile, error) {
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+"*")
	if err != nil {
		return nil, err
	}
	return &windowsPendingFile{f: f, path: path}, nil
}

type windowsPendingFile struct {
	f    *os.File
	path string
	done bool // replaced the file at path
}

func (p *windowsPendingFile) Write(b []byte) (int, error) { return p.f.Write(b) }

// CloseAtomicallyReplace flushes the temp file to disk (FlushFileBuffers),
// closes it, and moves it over the file at path with replaceFile.
func (p *windowsPendingFile) CloseAtomicallyReplace() error {
	if err := p.f.Sync(); err != nil {
		return err
	}
	if err := p.f.Close(); err != nil {
		return err
	}
	if err := replaceFile(p.f.Name(), p.path); err != nil {
		return err
	}
	p.done = true
	return nil
}

// Cleanup closes and removes the temp file, unless it replaced the file.
func (p *windowsPendingFile) Cleanup() error {
	if p.done {
		return nil
	}
	_ = p.f.Close() // it may be closed already
	return os.Remove(p.f.Name())
}

// replaceInUseFor is how long replaceFile retries while the file it
// replaces is open in another process.
const replaceInUseFor = 2 * time.Second

// replaceFile moves from over to with MoveFileEx(MOVEFILE_REPLACE_EXISTING
// | MOVEFILE_WRITE_THROUGH): the move is atomic, and it returns once the
// move is on disk. Windows refuses to replace a file that is open (a Store
// of another process reading the state file, without the file-wide lock,
// holds it open for the time of one read): while the move is refused with
// ERROR_ACCESS_DENIED or ERROR_SHARING_VIOLATION, it is retried, for up to
// replaceInUseFor. A refused move changes nothing.
func replaceFile(from, to string) error {
	src, err := windows.UTF16PtrFromString(from)
	if err != nil {
		return &os.LinkError{Op: "MoveFileEx", Old: from, New: to, Err: err}
	}
	dst, err := windows.UTF16PtrFromString(to)
	if err != nil {
		return &os.LinkError{Op: "MoveFileEx", Old: from, New: to, Err: err}
	}
	deadline := time.Now().Add(replaceInUseFor)
	for pause := time.Millisecond; ; pause = min(2*pause, 100*time.Millisecond) {
		err := windows.MoveFileEx(src, dst, windows.MOVEFILE_REPLACE_EXISTING|windows.MOVEFILE_WRITE_THROUGH)
		inUse := errors.Is(err, windows.ERROR_ACCESS_DENIED) || errors.Is(err, windows.ERROR_SHARING_VIOLATION)
		if err == nil {
			return nil
		}
		if !inUse || time.Now().After(deadline) {
			return &os.LinkError{Op: "MoveFileEx", Old: from, New: to, Err: err}
		}
		time.Sleep(pause)
	}
}

// syncDir does nothing on Windows, which has no directory fsync (see
// syncDir in fsync_windows.go): MoveFileEx's MOVEFILE_WRITE_THROUGH makes
// the replace durable.
func (s *StateFile) syncDir() error { return syncDir(s.dir) }
