//go:build !race

package faulttest_test

const raceEnabled = false
