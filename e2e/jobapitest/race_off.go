//go:build !race

package jobapitest

const raceEnabled = false
