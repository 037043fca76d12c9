//go:build !race

package testledger

// Race reports whether the tests run under the race detector.
const Race = false
