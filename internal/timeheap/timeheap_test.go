package timeheap_test

import (
	"container/heap"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/idemgo/idem/internal/timeheap"
)

type item struct {
	at time.Time
	i  int
}

func (e *item) HeapTime() time.Time { return e.at }
func (e *item) HeapIndex() *int     { return &e.i }

// TestHeap: after pushes, removals and moves (heap.Fix), the items left come
// out earliest first, each index kept right while in the heap and -1 after.
func TestHeap(t *testing.T) {
	base := time.Now()
	var h timeheap.Heap[*item]
	var in []*item
	for range 200 {
		e := &item{at: base.Add(time.Duration(rand.IntN(1000)) * time.Millisecond)}
		heap.Push(&h, e)
		in = append(in, e)
	}
	gone := map[*item]bool{}
	for _, e := range in[:50] {
		heap.Remove(&h, e.i)
		gone[e] = true
	}
	for _, e := range in[50:100] {
		e.at = base.Add(time.Duration(rand.IntN(1000)) * time.Millisecond)
		heap.Fix(&h, e.i)
	}
	for i, e := range h {
		if e.i != i {
			t.Fatalf("item at %d has index %d", i, e.i)
		}
	}
	var last time.Time
	for n := 0; h.Len() > 0; n++ {
		e := heap.Pop(&h).(*item)
		if gone[e] {
			t.Fatalf("a removed item came out")
		}
		if e.i != -1 {
			t.Fatalf("popped item has index %d, want -1", e.i)
		}
		if e.at.Before(last) {
			t.Fatalf("pop %d: %v came out after %v", n, e.at, last)
		}
		last = e.at
	}
	for e := range gone {
		if e.i != -1 {
			t.Fatalf("removed item has index %d, want -1", e.i)
		}
	}
}
