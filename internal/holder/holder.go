// Package holder identifies this process as a lease holder (its owner
// string) and tells whether the process an owner names has ended. Package
// idemstore exports it as Owner and HolderGone, whose doc describes the
// owner's format.
package holder

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

// String formats o as idemstore.HolderGone describes.
func (o ownerID) String() string {
	s := o.host + ":" + strconv.Itoa(o.pid) + ":" + o.rand
	if !o.scoped {
		return s
	}
	return fmt.Sprintf("%s;start=%d;boot=%s;pidns=%s;timens=%s", s, o.start, o.boot, o.pidns, o.timens)
}

// parseOwner parses an owner; ok is false for anything that is not exactly
// of the form idemstore.HolderGone describes.
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

// Self identifies this process as a lease holder: host, pid and a random
// part, and (on Linux) what proves on this host whether the process still
// lives. See idemstore.HolderGone.
func Self() string {
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

// SetHostnameForTest makes this process name host in its owner, as a
// process on another host would. Tests call it before the process's first
// claim.
func SetHostnameForTest(host string) {
	hostname = func() (string, error) { return host, nil }
	ownerOnce = sync.Once{}
}

// validField reports whether v can be an owner field's value.
func validField(v string) bool { return !strings.ContainsAny(v, "=; \t\n") }

// Gone reports whether owner names a process that has certainly ended:
// idemstore.HolderGone.
func Gone(owner string) bool {
	if standEnded(owner) {
		return true
	}
	o, ok := local(owner)
	return ok && processGone(o.pid, o.start)
}

// Local reports whether Gone can tell whether owner's process lives: an
// owner with the fields after rand, of this host, this boot of its kernel
// and this process's pid and time namespaces. For any other owner Gone is
// always false.
func Local(owner string) bool {
	_, ok := local(owner)
	return ok
}

func local(owner string) (ownerID, bool) {
	o, ok := parseOwner(owner)
	if !ok || !o.scoped {
		return ownerID{}, false
	}
	Self()
	if !self.scoped || o.host != self.host || o.boot != self.boot || o.pidns != self.pidns || o.timens != self.timens {
		return ownerID{}, false
	}
	return o, true
}

// EndedForTest returns an owner that Gone reports ended: this process's
// owner with pid 4194304, which no Linux process can have (pids stay below
// pid_max, at most 2^22). It returns "" where Gone cannot tell (an owner
// without scope: not Linux, or /proc unreadable). For tests of the rule
// that a dead holder's lease does not hold.
func EndedForTest() string {
	Self()
	if !self.scoped {
		return ""
	}
	o := self
	o.pid = 1 << 22
	if s := o.String(); Gone(s) {
		return s
	}
	return ""
}

// Short is owner as a person reads it in a message: "host pid N" for an
// owner of the form idemstore.HolderGone describes (the random part and the
// fields that prove a process's death left out), owner itself otherwise.
func Short(owner string) string {
	o, ok := parseOwner(owner)
	if !ok {
		return owner
	}
	return o.host + " pid " + strconv.Itoa(o.pid)
}

var (
	standMu sync.Mutex
	// stands are the owners Stand made: true once End ended them.
	stands = map[string]bool{}
)

// Stand returns a new owner of this process, for one attempt that is to end
// as if its process had died: this process's owner with another random
// part. Gone reports it alive (its process, this one, lives) until End is
// called with it; from then on Gone, in this process, reports it ended.
// Other processes see the owner of a live process: in them its lease holds.
//
// Package idemtest's crash kit gives each run it crashes such an owner and
// ends it once the run has returned, so that the recovery's claim takes
// the crashed attempt over at once, as the next process on the host takes
// over the attempt of a process that SIGKILL ended, whatever its lease.
func Stand() string {
	Self()
	standMu.Lock()
	defer standMu.Unlock()
	for {
		o := self
		var b [4]byte
		_, _ = rand.Read(b[:])
		o.rand = hex.EncodeToString(b[:])
		s := o.String()
		if _, dup := stands[s]; dup || o.rand == self.rand {
			continue // drawn before: draw again
		}
		stands[s] = false
		return s
	}
}

// End marks owner, made by Stand, ended: from now on Gone reports it so.
// The caller must know that nothing of this process holds anything as
// owner any more (every run made with it has returned). An owner that Stand
// did not make is left as it is.
func End(owner string) {
	standMu.Lock()
	defer standMu.Unlock()
	if _, ok := stands[owner]; ok {
		stands[owner] = true
	}
}

// standEnded reports whether owner was made by Stand and ended by End.
func standEnded(owner string) bool {
	standMu.Lock()
	defer standMu.Unlock()
	return stands[owner]
}
