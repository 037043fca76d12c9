package dupes

import "testing"

// TestRecent: the zero value guesses "not done"; eight done keys in a row
// turn it; one key that was not done halves the count, so a run of new
// keys turns it back within a claim or two; the count stays within 16.
func TestRecent(t *testing.T) {
	var r Recent
	if r.Mostly() {
		t.Fatal("zero value: Mostly, want not")
	}
	for i := range 7 {
		r.Saw(true)
		if r.Mostly() {
			t.Fatalf("after %d done keys: Mostly, want not before 8", i+1)
		}
	}
	r.Saw(true)
	if !r.Mostly() {
		t.Fatal("after 8 done keys: not Mostly")
	}
	for range 100 {
		r.Saw(true)
	}
	if n := r.n.Load(); n != 16 {
		t.Fatalf("count %d after 108 done keys, want the cap 16", n)
	}
	r.Saw(false)
	if !r.Mostly() {
		t.Fatal("16 halved to 8: not Mostly")
	}
	r.Saw(false)
	if r.Mostly() {
		t.Fatal("after two new keys: still Mostly")
	}
	for range 10 {
		r.Saw(false)
	}
	if n := r.n.Load(); n != 0 {
		t.Fatalf("count %d after new keys only, want 0", n)
	}
}
