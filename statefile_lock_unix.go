//go:build unix

package idem

import (
	"errors"
	"os"
	"syscall"
)

// tryLockExclusive takes an exclusive flock on f without waiting; ok is
// false if another open file holds one.
func tryLockExclusive(f *os.File) (ok bool, err error) {
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return false, nil
		}
		return false, err
	}
	return true, nil
}

// unlockFile releases the flock on f. Closing f alone is not enough at once: a
// lock goes with the open file description, which a child this process
// forks at that moment shares until its exec closes the copies of every
// descriptor (os/exec in another goroutine).
func unlockFile(f *os.File) error { return syscall.Flock(int(f.Fd()), syscall.LOCK_UN) }

// lockExclusive takes an exclusive flock on f, waiting while another open
// file holds one.
func lockExclusive(f *os.File) error {
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
		if !errors.Is(err, syscall.EINTR) {
			return err
		}
	}
}
