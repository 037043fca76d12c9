package idem

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
)

// ownerID is an owner, parsed.
type ownerID struct {
	host, rand string
	pid        int
	scoped     bool // the fields after rand are there
	start      uint64
	boot       string
	pidns      string
	timens     string
}

// String formats o as described above.
func (o ownerID) String() string {
	s := o.host + ":" + strconv.Itoa(o.pid) + ":" + o.rand
	if !o.scoped {
		return s
	}
	return fmt.Sprintf("%s;start=%d;boot=%s;pidns=%s;timens=%s", s, o.start, o.boot, o.pidns, o.timens)
}

// parseOwner parses an owner; ok is false for anything that is not exactly
// of the form above.
func parseOwner(s string) (o ownerID, ok bool) {
	head, tail, scoped := strings.Cut(s, ";")
	i := strings.LastIndexByte(head, ':')
	if i < 0 {
		return ownerID{}, false
	}
	j := strings.LastIndexByte(head[:i], ':')
	if j < 0 {
		return ownerID{}, false
	}
	o.host, o.rand = head[:j], head[i+1:]
	pid, err := strconv.ParseInt(head[j+1:i], 10, 32) // pid_t
	if err != nil || pid <= 0 || head[j+1] == '+' || o.host == "" || o.rand == "" {
		return ownerID{}, false
	}
	o.pid = int(pid)
	if !scoped {
		return o, true
	}
	seen := map[string]bool{}
	for _, f := range strings.Split(tail, ";") {
		k, v, ok := strings.Cut(f, "=")
		if !ok || seen[k] || strings.ContainsAny(v, "=;") {
			return ownerID{}, false
		}
		seen[k] = true
		switch k {
		case "start":
			if o.start, err = strconv.ParseUint(v, 10, 64); err != nil || v == "" || v[0] == '+' {
				return ownerID{}, false
			}
		case "boot":
			o.boot = v
		case "pidns":
			o.pidns = v
		case "timens":
			o.timens = v
		default:
			return ownerID{}, false // a field this version does not know may matter: cannot tell
		}
	}
	if !seen["start"] || !seen["boot"] || !seen["pidns"] || !seen["timens"] || o.boot == "" || o.pidns == "" {
		return ownerID{}, false
	}
	o.scoped = true
	return o, true
}

// scope is where this process's pid means something, and its start time:
// the fields of an owner after rand.
type scope struct {
	start               uint64
	boot, pidns, timens string
}

var (
	ownerOnce sync.Once
	self      ownerID // this process as an owner
	owner     string  // self.String()

	// hostname is os.Hostname; tests replace it to play a process on
	// another host.
	hostname = os.Hostname
)

// processOwner identifies this process as a lease holder: host, pid and a
// random part, and (on Linux) what proves on this host whether the process
// still lives. See [HolderGone].
func processOwner() string {
	ownerOnce.Do(func() {
		host, _ := hostname()
		if host == "" {
			host = "unknown-host"
		}
		var b [4]byte
		_, _ = rand.Read(b[:])
		self = ownerID{host: host, pid: os.Getpid(), rand: hex.EncodeToString(b[:])}
		if sc, ok := localScope(); ok && validField(sc.boot) && validField(sc.pidns) && validField(sc.timens) {
			self.scoped, self.start, self.boot, self.pidns, self.timens = true, sc.start, sc.boot, sc.pidns, sc.timens
		}
		owner = self.String()
	})
	return owner
}

// validField reports whether v can be an owner field's value.
func validField(v string) bool { return !strings.ContainsAny(v, "=; \t\n") }

// HolderGone reports whether owner — the Owner of a record, as idem writes
// it — names a process that has certainly ended: a process of this host
// (the same host name), of this boot of its kernel, in this process's pid
// and time namespaces, whose pid no longer exists, or now belongs to a
// process started at another time (the pid was reused), or is a zombie
// whose threads have all exited.
//
// The owners idem writes (ClaimRequest.Owner, Record.Owner, Info.Owner)
// have the form
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
func HolderGone(owner string) bool {
	o, ok := parseOwner(owner)
	if !ok || !o.scoped {
		return false
	}
	processOwner()
	if !self.scoped || o.host != self.host || o.boot != self.boot || o.pidns != self.pidns || o.timens != self.timens {
		return false
	}
	return processGone(o.pid, o.start)
}
