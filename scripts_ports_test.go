package idem_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestServerScriptsPortsBelowEphemeralRange: every throwaway-server script
// of scripts/ that restarts its server on the same ports (its crash
// command) picks them with scripts/lib/ports.sh's free_port, and free_port
// picks ports below the kernel's ephemeral range: a port inside it is free
// for any outgoing connection while the server is down, and one took the
// port of a broker that rabbitmq.sh crash restarted (eaddrinuse, a failed
// clean-clone run).
func TestServerScriptsPortsBelowEphemeralRange(t *testing.T) {
	paths, err := filepath.Glob("scripts/*.sh")
	if err != nil {
		t.Fatal(err)
	}
	var checked []string
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		src := string(b)
		if !strings.Contains(src, "\ncrash() {") {
			continue
		}
		checked = append(checked, filepath.Base(p))
		if !strings.Contains(src, `/lib/ports.sh"`) {
			t.Errorf("%s restarts its server (crash) but does not source lib/ports.sh: pick its ports with free_port", p)
		}
		if strings.Contains(src, "RANDOM") {
			t.Errorf("%s picks something with $RANDOM: pick ports with lib/ports.sh's free_port", p)
		}
	}
	// The six server scripts at least: the check cannot pass by finding none.
	for _, want := range []string{"kafka.sh", "mysql.sh", "nats.sh", "pg.sh", "rabbitmq.sh", "redis.sh"} {
		if !slices.Contains(checked, want) {
			t.Errorf("scripts/%s has no crash() any more (checked: %v): update this test", want, checked)
		}
	}

	if runtime.GOOS != "linux" {
		t.Skip("the ephemeral range is read from /proc (linux)")
	}
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		t.Skip(err)
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		t.Fatalf("/proc/sys/net/ipv4/ip_local_port_range: %q", b)
	}
	low, err := strconv.Atoi(f[0])
	if err != nil {
		t.Fatal(err)
	}
	if low <= 21024 {
		t.Skipf("the ephemeral range starts at %d: free_port has no room below it", low)
	}
	out, err := exec.Command("bash", "-c", `. scripts/lib/ports.sh && for i in $(seq 30); do free_port; done`).CombinedOutput()
	if err != nil {
		t.Fatalf("free_port: %v\n%s", err, out)
	}
	ports := strings.Fields(string(out))
	if len(ports) != 30 {
		t.Fatalf("30 calls of free_port printed %q", out)
	}
	for _, s := range ports {
		p, err := strconv.Atoi(s)
		if err != nil || p < 20000 || p >= low {
			t.Errorf("free_port printed %q: want a port from 20000 to %d, below the ephemeral range (%s)", s, low-1, strings.TrimSpace(string(b)))
		}
	}
}
