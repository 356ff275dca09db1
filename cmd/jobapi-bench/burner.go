package main

import (
	"os"
	"os/exec"
	"runtime"
)

// burnEnv, set to 1, makes the bench binary spin one core until it is killed: the overload
// scenario's "CPU saturated by another process".
const burnEnv = "JOBAPI_BENCH_BURN"

func burnMain() {
	runtime.GOMAXPROCS(1)
	x := 0
	for {
		x++
	}
}

// startBurners starts n processes that each spin a core; stop kills them (by pid: only
// the processes started here).
func startBurners(n int) (stop func(), err error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	var cmds []*exec.Cmd
	stop = func() {
		for _, c := range cmds {
			_ = c.Process.Kill()
			_ = c.Wait()
		}
	}
	for range n {
		c := exec.Command(exe)
		c.Env = append(os.Environ(), burnEnv+"=1")
		if err := c.Start(); err != nil {
			stop()
			return nil, err
		}
		cmds = append(cmds, c)
	}
	return stop, nil
}
