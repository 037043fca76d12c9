package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/cmd/idem/internal/hostsys"
)

// A period's command lock keeps two commands of one period from running at
// once on this host. idem takes a period's run over at once when the idem
// that held it was killed on this host (idemstore.HolderGone), without waiting
// out its lease; but the killed idem's command, and the processes it
// started, may live on: the command gets SIGTERM when its idem dies, which
// it may ignore or take long to obey, and the processes it started get
// nothing. So every command inherits, as file descriptor 3, an flock on a
// file of its period, and the next attempt's command starts only once no
// process holds it any more: the lock outlives idem exactly as long as the
// command and its children do.

// cmdLocks names the lock files of a ledger's periods: dir/prefix<hash>.lock.
// The zero cmdLocks takes no locks; one with err fails to.
type cmdLocks struct {
	dir, prefix string
	err         error // why there is no directory for them
}

// sqliteLocks are the command locks of the SQLite ledger at path: files
// beside it (idem writes there anyway: SQLite's -wal and -shm files).
func sqliteLocks(path string) cmdLocks {
	return cmdLocks{dir: filepath.Dir(path), prefix: filepath.Base(path) + ".cmd-"}
}

// postgresLocks are the command locks of a Postgres ledger, identified by
// server, database and schema: files in this user's idem state directory
// ($XDG_STATE_HOME/idem, else ~/.local/state/idem).
func postgresLocks(server, schema string) cmdLocks {
	return sharedLocks("postgres", server+"\x00"+schema)
}

// sharedLocks are the command locks of a store of kind (postgres, redis)
// on a server, identified by id: files in this user's idem state directory
// ($XDG_STATE_HOME/idem, else ~/.local/state/idem).
func sharedLocks(kind, id string) cmdLocks {
	dir := os.Getenv("XDG_STATE_HOME")
	if dir == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return cmdLocks{err: fmt.Errorf("no directory for them: %w", err)}
		}
		dir = filepath.Join(home, ".local", "state")
	}
	h := sha256.Sum256([]byte(id))
	return cmdLocks{dir: filepath.Join(dir, "idem"), prefix: kind + "-" + hex.EncodeToString(h[:6]) + ".cmd-"}
}

// lock takes the lock of key's command, waiting (until ctx ends) while a
// command of an earlier attempt, or a process it started, still holds it.
// waiting is called once if it has to wait, with what the lock file says of
// the holder. On a system without the locks (hostsys.Locks), nil, nil.
func (c cmdLocks) lock(ctx context.Context, key idem.Key, waiting func(holder string)) (*cmdLock, error) {
	if !hostsys.Locks {
		return nil, nil
	}
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
	f, err := hostsys.Lock(ctx, path, waiting)
	if err != nil {
		return nil, err
	}
	return &cmdLock{f: f, path: path}, nil
}

// path is the lock file of key's command.
func (c cmdLocks) path(key idem.Key) string {
	h := sha256.Sum256([]byte(key.Job + "\x00" + key.Period))
	return filepath.Join(c.dir, c.prefix+hex.EncodeToString(h[:8])+".lock")
}

// cmdLock is a held command lock.
type cmdLock struct {
	f    *os.File
	path string
}

// started records in the lock file which process holds it, for the message
// of the next attempt that waits for it.
func (l *cmdLock) started(pid int, key idem.Key, attempt int64) {
	if l == nil {
		return
	}
	_ = l.f.Truncate(0) // fails, harmlessly, on another user's file
	_, _ = fmt.Fprintf(l.f, "command pid %d, attempt %d of %s\n", pid, attempt, key)
}

// release drops idem's hold on the lock: the command and the processes it
// started still hold it until they end. done removes the file: the period
// is done, no command of it starts again.
func (l *cmdLock) release(done bool) {
	if l == nil {
		return
	}
	if done {
		_ = os.Remove(l.path)
	}
	l.f.Close()
}
