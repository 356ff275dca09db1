//go:build race

package faulttest_test

// raceEnabled: the jobapi binary is built with -race too, reusing the test build's cache.
const raceEnabled = true
