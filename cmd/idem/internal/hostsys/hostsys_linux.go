package hostsys

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// Locks reports whether Lock takes a lock on this system.
const Locks = true

// SetParentDeathSignal asks the kernel to send the command SIGTERM if idem
// dies first (SIGKILL, OOM killer): without a heartbeat its lease runs out,
// and a later run may start the period again, so the old command must not
// linger.
func SetParentDeathSignal(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGTERM
}

// Lock takes the exclusive lock (flock) of the file at path, created if
// need be, waiting (until ctx ends) while another process holds it. waiting
// is called once if it has to wait, with what the file says of the holder.
// The lock is that of the file at path when Lock returns (one removed
// meanwhile is opened again); closing the file releases it.
func Lock(ctx context.Context, path string, waiting func(holder string)) (*os.File, error) {
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
			return f, nil
		} else if err != nil && !errors.Is(err, os.ErrNotExist) {
			f.Close()
			return nil, err
		}
		f.Close()
	}
}

// Statfs reads dir's filesystem (statfs(2)).
func Statfs(dir string) (FS, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return FS{}, err
	}
	free := st.Bavail * uint64(st.Bsize)
	if os.Geteuid() == 0 {
		free = st.Bfree * uint64(st.Bsize) // root may use the reserved blocks
	}
	return FS{Type: uint32(st.Type), Free: free, Files: st.Files, FreeFiles: st.Ffree}, nil
}

// Writable reports why this user cannot write in dir (access(2)), if not.
func Writable(dir string) error {
	const wOK = 0x2
	return syscall.Access(dir, wOK)
}
