// Package timeheap is a min-heap by time for container/heap, whose items
// keep their own index in it (for heap.Fix and heap.Remove): the
// Scheduler's jobs by wake time, Runs' first heartbeats by due time.
package timeheap

import "time"

// Item is what a Heap holds: a pointer that gives the time it is ordered
// by, and where its index in the heap is kept (-1 once out of it).
type Item interface {
	HeapTime() time.Time
	HeapIndex() *int
}

// Heap implements heap.Interface, earliest first.
type Heap[T Item] []T

func (h Heap[T]) Len() int           { return len(h) }
func (h Heap[T]) Less(i, k int) bool { return h[i].HeapTime().Before(h[k].HeapTime()) }
func (h Heap[T]) Swap(i, k int) {
	h[i], h[k] = h[k], h[i]
	*h[i].HeapIndex(), *h[k].HeapIndex() = i, k
}

// Push adds x, a T (for heap.Push).
func (h *Heap[T]) Push(x any) {
	e := x.(T)
	*e.HeapIndex() = len(*h)
	*h = append(*h, e)
}

// Pop takes the last item out (for heap.Pop and heap.Remove); its index
// becomes -1.
func (h *Heap[T]) Pop() any {
	old := *h
	e := old[len(old)-1]
	var zero T
	old[len(old)-1] = zero
	*e.HeapIndex() = -1
	*h = old[:len(old)-1]
	return e
}
