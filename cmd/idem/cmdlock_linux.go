package main

import (
	"context"
	"errors"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/idemgo/idem"
)

// lock takes the lock of key's command, waiting (until ctx ends) while a
// command of an earlier attempt, or a process it started, still holds it.
// waiting is called once if it has to wait, with what the lock file says of
// the holder.
func (c cmdLocks) lock(ctx context.Context, key idem.Key, waiting func(holder string)) (*cmdLock, error) {
	if c.err != nil {
		return nil, c.err
	}
	if c.dir == "" {
		return nil, nil
	}
	if err := os.MkdirAll(c.dir, 0o755); err != nil {
		return nil, err
	}
	path := c.path(key)
	told := false
	for {
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
		if errors.Is(err, os.ErrPermission) {
			f, err = os.Open(path) // another user's: an flock needs no write access
		}
		if err != nil {
			return nil, err
		}
		for {
			err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
			if err == nil {
				break
			}
			if !errors.Is(err, syscall.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR) {
				f.Close()
				return nil, err
			}
			if !told {
				told = true
				b, _ := os.ReadFile(path)
				waiting(strings.TrimSpace(string(b)))
			}
			t := time.NewTimer(100 * time.Millisecond)
			select {
			case <-ctx.Done():
				t.Stop()
				f.Close()
				return nil, context.Cause(ctx)
			case <-t.C:
			}
		}
		// Its period may have been done, and the file removed, meanwhile:
		// the lock is that of the file at path.
		held, err := f.Stat()
		if err != nil {
			f.Close()
			return nil, err
		}
		if now, err := os.Stat(path); err == nil && os.SameFile(held, now) {
			return &cmdLock{f: f, path: path}, nil
		} else if err != nil && !errors.Is(err, os.ErrNotExist) {
			f.Close()
			return nil, err
		}
		f.Close()
	}
}
