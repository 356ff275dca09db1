package main

import (
	"math"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
)

// cgroupMemoryMax is where a container's memory limit is read (cgroup v2).
const cgroupMemoryMax = "/sys/fs/cgroup/memory.max"

// memoryLimitShare is the part of the container's limit given to the Go runtime as its soft
// limit: the rest is for what the runtime does not count (the binary's text, the kernel's
// socket buffers of thousands of runner connections) and for the moment the GC needs to
// catch up.
const memoryLimitShare = 0.9

// containerMemoryLimit sets the Go runtime's soft memory limit from the container's memory
// limit, unless GOMEMLIMIT sets one. Without it the GC lets the heap grow to twice what is
// live plus the goroutines' stacks: a replica that holds 10,000 long-polled requests
// (stacks of some 180 MB that make no garbage) grows its heap by that much again before it
// collects, and a container sized for what the replica really uses is killed with half of
// its heap garbage. With it the GC collects sooner as the limit nears (and, should live
// memory ever pass it, spends at most about half the CPU on trying, as the runtime caps
// it). It returns the limit set, 0 when none.
func containerMemoryLimit(getenv func(string) string, path string) int64 {
	if getenv("GOMEMLIMIT") != "" {
		return 0
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return 0 // not in a cgroup v2 container, or not readable: the runtime's default
	}
	s := strings.TrimSpace(string(b))
	max, err := strconv.ParseInt(s, 10, 64)
	if err != nil || max <= 0 {
		return 0 // "max": no limit
	}
	limit := int64(math.Floor(float64(max) * memoryLimitShare))
	debug.SetMemoryLimit(limit)
	return limit
}
