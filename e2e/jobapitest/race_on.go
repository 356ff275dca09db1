//go:build race

package jobapitest

// raceEnabled: BuildJobapi builds with -race too, reusing the test build's cache.
const raceEnabled = true
