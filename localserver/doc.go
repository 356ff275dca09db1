// Package localserver starts throwaway Postgres and Redis servers from the binaries
// installed on this machine, for `jobapi dev` and for tests: no Docker, no downloads.
//
// Every server runs as a child process of the caller on a free 127.0.0.1 port. The child is
// asked to stop when the caller dies (Linux parent-death signal), so an interrupted test run
// does not leave servers behind; Stop is still the way to shut down cleanly and remove the
// directories a Start created.
package localserver
