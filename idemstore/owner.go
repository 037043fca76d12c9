package idemstore

import "github.com/idemgo/idem/internal/holder"

// Owner identifies this process as a lease holder: the Owner that idem's
// engine puts in every [ClaimRequest] it makes in this process (see
// [HolderGone] for its form). A store that holds something for an attempt
// of this process (the state file's lock) may record it as the attempt's
// owner.
func Owner() string { return holder.Self() }

// HolderGone reports whether owner — the Owner of a record, as idem writes
// it — names a process that has certainly ended: a process of this host
// (the same host name), of this boot of its kernel, in this process's pid
// and time namespaces, whose pid no longer exists, or now belongs to a
// process started at another time (the pid was reused), or is a zombie
// whose threads have all exited.
//
// The owners idem writes ([Owner]: ClaimRequest.Owner, Record.Owner,
// idem.Info.Owner) have the form
//
//	host:pid:rand;start=S;boot=B;pidns=N;timens=T
//
// host is the host name, pid the process id, rand 8 hex digits drawn once
// per process. The fields after the first ';' say which process that pid
// was, and where the pid means something; idem writes them on Linux, when
// it can read them from /proc, and otherwise ends the owner after rand:
//
//	start   the process's start time, in clock ticks after boot (field 22
//	        of /proc/<pid>/stat): a pid reused by a later process has
//	        another start time
//	boot    the kernel's boot id (/proc/sys/kernel/random/boot_id): pids and
//	        start times mean nothing across a reboot
//	pidns   the inode of the process's pid namespace (/proc/self/ns/pid):
//	        two containers with one host name number their processes apart
//	timens  the inode of its time namespace (/proc/self/ns/time), which
//	        shifts the start times that /proc shows; empty on kernels
//	        without time namespaces
//
// An owner without them (written by an older idem, or on another system)
// is valid, and so is one with fields this version does not know; of
// neither can HolderGone tell whether its process lives.
//
// It returns false whenever it cannot be certain: an owner on another host,
// in another container or from before a reboot; an owner written by an
// older idem or on another system (no start time); an owner it cannot
// parse; a /proc it cannot read, or a permission error; and on every system
// but Linux. Then the holder's lease decides, as it always did.
//
// Stores call it for a record whose attempt is running and whose lease has
// not expired: if it says true, the attempt died with its process, and the
// store takes the key over at once, exactly as if the lease had expired
// (the claim is in doubt, the abandoned attempt counts as a failure, and
// the record's last error says that its process died). Resolve treats such
// a record as not held. A store that serves one host (SQLite, a file) and a
// shared one (Postgres) alike may call it: on another host it is false.
// Without it a store is still correct; a crashed holder is then taken over
// only when its lease expires.
//
// It says nothing of the processes the holder started: they may run on
// after it died, beside the attempt that takes over. (The idem command
// waits for its command's; a fn that starts processes must see to them.)
//
// It costs a kill(2) with signal 0 and a read of /proc/<pid>/stat.
func HolderGone(owner string) bool { return holder.Gone(owner) }
