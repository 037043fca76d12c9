package holder_test

import (
	"strings"
	"testing"

	"github.com/idemgo/idem/idemtest"
	"github.com/idemgo/idem/internal/holder"
)

// TestStandEnd: an owner that Stand makes is this process's (its host and
// pid) with a random part of its own; Gone reports it alive until End ends
// it, and ended from then on, in this process. Another process sees the
// owner of a live process (this one). End leaves an owner that Stand did
// not make as it is.
func TestStandEnd(t *testing.T) {
	self := holder.Self()
	head, scope, _ := strings.Cut(self, ";")
	hostPID := head[:strings.LastIndexByte(head, ':')]
	o := holder.Stand()
	oHead, oScope, _ := strings.Cut(o, ";")
	if o == self || holder.Stand() == o || !strings.HasPrefix(oHead, hostPID+":") || oScope != scope {
		t.Fatalf("Stand() = %q, self %q: want this process's owner with a random part of its own", o, self)
	}
	if holder.Gone(o) {
		t.Fatalf("Gone(%q) before End: true, want false (its process lives)", o)
	}
	holder.End(o)
	if !holder.Gone(o) || holder.Gone(self) {
		t.Fatalf("after End: Gone(stand-in) = %v, Gone(self) = %v; want true, false", holder.Gone(o), holder.Gone(self))
	}
	if ex := idemtest.Fork(t, o, func(arg string) {
		if holder.Gone(arg) {
			panic("another process finds the ended stand-in's process gone; it lives")
		}
	}); ex.Code != 0 || ex.Killed {
		t.Fatalf("child: %+v", ex)
	}
	other := hostPID + ":0badf00d"
	if scope != "" {
		other += ";" + scope
	}
	holder.End(other) // not made by Stand
	if holder.Gone(other) {
		t.Fatalf("End(%q), an owner Stand did not make: Gone now reports it ended", other)
	}
}
