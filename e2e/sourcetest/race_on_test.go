//go:build race

package sourcetest_test

// memoryFactor scales memory bounds: the race detector's shadow memory multiplies what a
// -race replica takes.
const memoryFactor = 4
