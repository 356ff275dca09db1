package main

import (
	"context"
	"fmt"
	"io"
	"strconv"

	"github.com/jobapi/jobapi/operatorclient"
)

// pipelineFailedError makes `jobapi wait` exit non-zero for a pipeline that did not succeed.
type pipelineFailedError struct{ status string }

func (e pipelineFailedError) Error() string { return "pipeline " + e.status }

func wait(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	if len(args) != 2 {
		return fmt.Errorf("wait: want PROJECT_ID PIPELINE_ID")
	}
	project, err1 := strconv.ParseInt(args[0], 10, 64)
	pipeline, err2 := strconv.ParseInt(args[1], 10, 64)
	if err1 != nil || err2 != nil || project <= 0 || pipeline <= 0 {
		return fmt.Errorf("wait: project and pipeline must be positive integers")
	}
	url := getenv("JOBAPI_URL")
	if url == "" {
		url = "http://127.0.0.1:8080"
	}
	c := operatorclient.New(url, getenv("JOBAPI_ADMIN_TOKEN"))
	p, err := c.WaitPipeline(ctx, project, pipeline, operatorclient.WaitOptions{OnProgress: func(p operatorclient.Progress) {
		fmt.Fprintf(stdout, "pipeline %d: %s, %d jobs remaining, %d finished\n", pipeline, p.Status, p.JobsRemaining, len(p.Finished))
	}})
	if err != nil {
		return err
	}
	if p.Status != "success" {
		return pipelineFailedError{status: p.Status}
	}
	return nil
}
