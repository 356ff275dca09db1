package runnerclient

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// FakeShell is an Executor that pretends to be the shell executor without
// running anything, so a job's log and result depend only on its script.
// For each line it writes "$ <line>\n" (as the shell executor echoes
// commands) and then:
//
//	echo <text>    "<text>\n", taken literally (no variable expansion)
//	sleep <d>      nothing; waits d (Go duration or seconds), or until ctx ends
//	exit [n]       nothing; ends the step, failing with ExitError{n} when n != 0
//	               (no n is 0, a non-numeric n is 1)
//	anything else  "ok: <line>\n"
type FakeShell struct{}

// Run implements Executor.
func (FakeShell) Run(ctx context.Context, _ *Job, step Step, out io.Writer) error {
	for _, line := range step.Script {
		if err := ctx.Err(); err != nil {
			return err
		}
		fmt.Fprintf(out, "$ %s\n", line)
		cmd, arg, _ := strings.Cut(strings.TrimSpace(line), " ")
		arg = strings.TrimSpace(arg)
		switch cmd {
		case "echo":
			fmt.Fprintf(out, "%s\n", arg)
		case "sleep":
			d, err := time.ParseDuration(arg)
			if err != nil {
				secs, _ := strconv.ParseFloat(arg, 64)
				d = time.Duration(secs * float64(time.Second))
			}
			timer := time.NewTimer(d)
			select {
			case <-ctx.Done():
				timer.Stop()
				return ctx.Err()
			case <-timer.C:
			}
		case "exit":
			code, err := strconv.Atoi(arg)
			if err != nil && arg != "" {
				code = 1
			}
			if code != 0 {
				return &ExitError{Code: code}
			}
			return nil
		default:
			fmt.Fprintf(out, "ok: %s\n", line)
		}
	}
	return ctx.Err()
}
