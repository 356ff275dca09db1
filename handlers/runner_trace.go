// Runner protocol, the live log. PATCH /jobs/:id/trace takes the job's token (JOB-TOKEN).

package handlers

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
)

// contentRange parses "start-end" (end inclusive, as gitlab-runner sends it). Like GitLab,
// only start decides where the body goes; end must agree with the body's length.
var contentRangePattern = regexp.MustCompile(`^(?:bytes )?(\d{1,15})-(\d{1,15})$`)

// ParseContentRange returns the start offset of a trace patch of n bytes.
func ParseContentRange(header string, n int) (int64, error) {
	if header == "" {
		return 0, errors.New("missing header Content-Range")
	}
	m := contentRangePattern.FindStringSubmatch(strings.TrimSpace(header))
	if m == nil {
		return 0, fmt.Errorf("Content-Range must be start-end, got %.40q", header)
	}
	start, _ := strconv.ParseInt(m[1], 10, 64)
	end, _ := strconv.ParseInt(m[2], 10, 64)
	if end < start-1 {
		return 0, fmt.Errorf("Content-Range end %d is before start %d", end, start)
	}
	if n > 0 && end-start+1 != int64(n) {
		return 0, fmt.Errorf("Content-Range %d-%d does not match a body of %d bytes", start, end, n)
	}
	return start, nil
}

func (h *Handler) patchTrace(w http.ResponseWriter, r *http.Request) error {
	id, err := jobID(r)
	if err != nil {
		return err
	}
	token := jobToken(r, "")
	if err := h.limitJob(r, "job_trace", id, token); err != nil {
		return err
	}
	data, err := io.ReadAll(r.Body)
	if err != nil {
		return bodyError(err)
	}
	start, err := ParseContentRange(r.Header.Get("Content-Range"), len(data))
	if err != nil {
		return badRequest("%s", err.Error())
	}
	res, err := h.svc.AppendTrace(r.Context(), id, token, start, data)
	if err != nil {
		return err
	}
	interval := traceIntervalIdle
	if h.traceWatch != nil {
		if watched, err := h.traceWatch.Watched(r.Context(), id); err == nil && watched {
			interval = traceIntervalWatched
		}
	}
	w.Header().Set("Job-Status", string(res.Status))
	w.Header().Set("Range", "0-"+strconv.FormatInt(res.Size, 10))
	w.Header().Set("X-GitLab-Trace-Update-Interval", strconv.Itoa(int(interval.Seconds())))
	writeJSON(w, http.StatusAccepted, map[string]string{"status": string(res.Status)})
	return nil
}
