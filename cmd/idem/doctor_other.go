//go:build !linux

package main

// checkFilesystem is Linux only (statfs magic numbers).
func checkFilesystem(rep *doctorReport, dir string) {
	rep.add(levelWarn, "filesystem", "cannot tell on this system whether %s is a local filesystem: make sure it is not NFS, SMB or FUSE", dir)
}

func checkWritable(rep *doctorReport, dir string) {}
