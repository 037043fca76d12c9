package main

import (
	"slices"
	"testing"
)

func TestDemo(t *testing.T) {
	got, err := demo(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"2026-10-27", "2026-10-28", "2026-10-29", "2026-10-30", "2026-10-31", "2026-11-01"}
	if !slices.Equal(got, want) {
		t.Fatalf("settled %v, want %v: every day once, in order", got, want)
	}
}
