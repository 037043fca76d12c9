package idem

// StateLockPath is the lock file of job's lock in the state file s.
func StateLockPath(s *StateFile, job string) string { return s.lockPath(job) }
