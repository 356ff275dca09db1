package webui

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/jobapi/jobapi/builds"
)

const runnersPerPage = 50

type runnersData struct {
	Runners []runnerRow
	Page    int
	PrevURL string
	NextURL string
	Total   int
	// NewToken is a token just reset: shown on this answer only, never stored or
	// redirected through a URL.
	NewToken *newToken
}

type newToken struct {
	RunnerID  int64
	Token     string
	ExpiresAt string
}

type runnerRow struct {
	builds.Runner
	Managers []managerRow
}

type managerRow struct {
	builds.Manager
	TwoPhase bool
}

func (u *UI) runnersData(r *http.Request) (runnersData, error) {
	d := runnersData{Page: int(max(queryInt(r, "page", 1), 1))}
	list, total, err := u.runners.List(r.Context(), builds.Page{Page: d.Page, PerPage: runnersPerPage})
	if err != nil {
		return d, err
	}
	d.Total = total
	for _, rn := range list {
		row := runnerRow{Runner: rn}
		for _, m := range rn.Managers {
			features := map[string]bool{}
			_ = json.Unmarshal(m.Features, &features)
			row.Managers = append(row.Managers, managerRow{Manager: m, TwoPhase: features["two_phase_job_commit"]})
		}
		d.Runners = append(d.Runners, row)
	}
	if d.Page > 1 {
		d.PrevURL = fmt.Sprintf("/runners?page=%d", d.Page-1)
	}
	if d.Page*runnersPerPage < total {
		d.NextURL = fmt.Sprintf("/runners?page=%d", d.Page+1)
	}
	return d, nil
}

func (u *UI) runnersPage(w http.ResponseWriter, r *http.Request) {
	d, err := u.runnersData(r)
	if err != nil {
		u.fail(w, r, err)
		return
	}
	u.render(w, r, http.StatusOK, "runners", view{Title: "Runners", Nav: "runners", Data: d})
}

func (u *UI) runnerPause(w http.ResponseWriter, r *http.Request) {
	id, err := pathInt(r, "runner_id")
	if err != nil {
		u.fail(w, r, err)
		return
	}
	paused := strings.HasSuffix(r.URL.Path, "/pause")
	if _, err := u.runners.Update(r.Context(), id, builds.RunnerUpdate{Paused: &paused}); err != nil {
		u.fail(w, r, err)
		return
	}
	notice := "runner_resumed"
	if paused {
		notice = "runner_paused"
	}
	http.Redirect(w, r, withNotice("/runners", notice), http.StatusSeeOther)
}

func (u *UI) runnerDelete(w http.ResponseWriter, r *http.Request) {
	id, err := pathInt(r, "runner_id")
	if err != nil {
		u.fail(w, r, err)
		return
	}
	if err := u.runners.Delete(r.Context(), id); err != nil {
		u.fail(w, r, err)
		return
	}
	http.Redirect(w, r, withNotice("/runners", "runner_deleted"), http.StatusSeeOther)
}

// runnerResetToken answers with the runners page itself, the new token on it: a redirect
// would have to carry the token in a URL (history, logs).
func (u *UI) runnerResetToken(w http.ResponseWriter, r *http.Request) {
	id, err := pathInt(r, "runner_id")
	if err != nil {
		u.fail(w, r, err)
		return
	}
	tok, err := u.runners.ResetToken(r.Context(), id)
	if err != nil {
		u.fail(w, r, err)
		return
	}
	d, err := u.runnersData(r)
	if err != nil {
		u.fail(w, r, err)
		return
	}
	d.NewToken = &newToken{RunnerID: id, Token: tok.Token, ExpiresAt: "never"}
	if tok.ExpiresAt != nil {
		d.NewToken.ExpiresAt = tok.ExpiresAt.UTC().Format("2006-01-02 15:04 UTC")
	}
	u.render(w, r, http.StatusOK, "runners", view{Title: "Runners", Nav: "runners", Data: d,
		Notice: fmt.Sprintf("Runner %d has a new token; every earlier one stopped working.", id)})
}
