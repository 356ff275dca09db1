package handlers

import (
	"net/http"
	"strconv"
	"time"

	"github.com/jobapi/jobapi/api"
	"github.com/jobapi/jobapi/builds"
)

// maxWaitSeconds bounds one wait request; callers loop on jobs_remaining.
const maxWaitSeconds = int(builds.MaxWait / time.Second)

func (h *Handler) waitPipeline(w http.ResponseWriter, r *http.Request) error {
	pid, err := projectID(r)
	if err != nil {
		return err
	}
	id, err := pathID(r, "pipeline_id")
	if err != nil {
		return err
	}
	timeout := 30
	if v := r.URL.Query().Get("timeout"); v != "" {
		timeout, err = strconv.Atoi(v)
		if err != nil || timeout < 0 || timeout > maxWaitSeconds {
			return badRequest("timeout must be whole seconds from 0 to %d", maxWaitSeconds)
		}
	}
	res, err := h.svc.WaitPipeline(r.Context(), pid, id, time.Duration(timeout)*time.Second)
	if err != nil {
		return err
	}
	if res.Finished == nil {
		res.Finished = []int64{}
	}
	writeJSON(w, http.StatusOK, api.PipelineWait{Status: res.Status, JobsRemaining: res.JobsRemaining, Finished: res.Finished})
	return nil
}
