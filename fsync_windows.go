//go:build windows

package idem

// syncDir does nothing on Windows, which has no directory fsync: a
// directory cannot be opened for writing, which FlushFileBuffers needs.
// NTFS journals its directory changes; the state file's replace is made
// durable by MoveFileEx's MOVEFILE_WRITE_THROUGH instead (see
// statefile_write_windows.go), while a new file's directory entry (a new
// ledger file, a new lock file) is as durable as the journal makes it.
func syncDir(dir string) error { return nil }
