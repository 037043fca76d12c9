package main

import (
	"errors"
	"fmt"

	"github.com/idemgo/idem/cmd/idem/internal/hostsys"
)

// Filesystem magic numbers (statfs(2) f_type, linux/magic.h).
const (
	magicNFS    = 0x6969
	magicSMB    = 0x517B
	magicCIFS   = 0xFF534D42
	magicSMB2   = 0xFE534D42
	magicFUSE   = 0x65735546
	magic9P     = 0x01021997
	magicCeph   = 0x00C36400
	magicAFS    = 0x5346414F
	magicKAFS   = 0x6B414653
	magicExt    = 0xEF53
	magicXFS    = 0x58465342
	magicBtrfs  = 0x9123683E
	magicTmpfs  = 0x01021994
	magicOverl  = 0x794C7630
	magicZFS    = 0x2FC12FC1
	magicF2FS   = 0xF2F52010
	magicBcache = 0xCA451A4E
)

// networkFS are the filesystems SQLite's locking and shared memory cannot
// rely on, with what they are.
var networkFS = map[uint32]string{
	magicNFS:  "NFS",
	magicSMB:  "SMB",
	magicCIFS: "CIFS/SMB",
	magicSMB2: "SMB2",
	magicFUSE: "FUSE (sshfs, s3fs, gcsfuse, fuse-overlayfs...)",
	magic9P:   "9p (WSL's Windows drives, VM shared folders)",
	magicCeph: "CephFS",
	magicAFS:  "AFS",
	magicKAFS: "AFS",
}

var localFS = map[uint32]string{
	magicExt: "ext2/3/4", magicXFS: "xfs", magicBtrfs: "btrfs", magicTmpfs: "tmpfs", magicOverl: "overlayfs",
	magicZFS: "zfs", magicF2FS: "f2fs", magicBcache: "bcachefs",
}

// checkFilesystem flags a ledger directory on a network filesystem, and one
// whose filesystem is full.
func checkFilesystem(rep *doctorReport, dir string) {
	st, err := hostsys.Statfs(dir)
	if errors.Is(err, hostsys.ErrUnsupported) {
		rep.add(levelWarn, "filesystem", "cannot tell on this system whether %s is a local filesystem: make sure it is not NFS, SMB or FUSE", dir)
		return
	}
	if err != nil {
		rep.add(levelWarn, "filesystem", "cannot tell the filesystem of %s: %v", dir, err)
		return
	}
	checkSpace(rep, dir, st)
	magic := st.Type
	if name, ok := networkFS[magic]; ok {
		rep.add(levelError, "filesystem", "%s is on %s: not safe for SQLite (its locks and WAL shared memory do not work there; two hosts can run a period twice or corrupt the ledger). Move the ledger to a local disk of the one host that runs the jobs, or use --postgres for jobs on several hosts", dir, name)
		return
	}
	if name, ok := localFS[magic]; ok {
		if magic == magicTmpfs {
			rep.add(levelWarn, "filesystem", "%s is on tmpfs: local, but lost at reboot, and with it the record of what ran. Put the ledger on a disk (e.g. /var/lib/idem)", dir)
			return
		}
		rep.add(levelOK, "filesystem", "%s is on %s, a local filesystem", dir, name)
		return
	}
	rep.add(levelOK, "filesystem", "%s is on a filesystem of type %s, not a known network filesystem", dir, fmt.Sprintf("0x%X", magic))
}

// checkWritable warns when SQLite could not create its -wal and -shm files.
// (Nothing on a system where it cannot tell.)
func checkWritable(rep *doctorReport, dir string) {
	err := hostsys.Writable(dir)
	if errors.Is(err, hostsys.ErrUnsupported) {
		return
	}
	if err != nil {
		rep.add(levelWarn, "directory", "%s is not writable by this user (%v): idem, run by a user who cannot write here, fails, since SQLite creates -wal and -shm files beside the ledger. Run doctor as the jobs' user, or fix the directory's owner", dir, err)
		return
	}
	rep.add(levelOK, "directory", "%s is writable", dir)
}

// minFree is the room below which doctor calls a ledger's file system full:
// a commit needs a few pages beside the -wal file's growth.
const minFree = 64 << 10

// checkSpace reports a ledger directory whose file system is full (of bytes
// or of inodes): every claim and done mark fails there, and SQLite cannot
// even create the -shm file a reader needs.
func checkSpace(rep *doctorReport, dir string, st hostsys.FS) {
	free := st.Free
	switch {
	case free < minFree:
		rep.full = true
		rep.add(levelError, "space", "no space left on device: the file system of %s has %s free. Every claim and done mark fails until space is freed (idem reports the periods it could not record; none is lost). Free space on it, then rerun", dir, size(int64(free)))
	case st.Files > 0 && st.FreeFiles == 0:
		rep.full = true
		rep.add(levelError, "space", "no space left on device: the file system of %s has no free inode. idem cannot create its -wal and -shm files until files are removed", dir)
	default:
		rep.add(levelOK, "space", "%s free on the file system of %s", size(int64(free)), dir)
	}
}
