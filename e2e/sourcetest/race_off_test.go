//go:build !race

package sourcetest_test

// memoryFactor scales memory bounds (see race_on_test.go).
const memoryFactor = 1
