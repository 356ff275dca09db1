package webui

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/builds/views"
)

// twoPhaseFlag is the flag that gates two-phase commit (featureflags.AllowRunnerJobAcknowledgement).
const twoPhaseFlag = "allow_runner_job_acknowledgement"

type twoPhaseData struct {
	Waiting      []waitingRow
	WaitingTotal int
	Recent       []recentRow
	Latency      views.AckLatency
	Window       int
	AckTTL       time.Duration
	// Flag nil: no flag store here (another OpenFeature provider manages it).
	Flag *Feature
}

type waitingRow struct {
	builds.JobView
	Left time.Duration
}

type recentRow struct {
	views.BuildEvent
	Detail string
}

// recentTypes are the events the page lists: what two-phase commit did to jobs lately.
var recentTypes = []string{builds.EventAckTimeout, builds.EventDeclined, builds.EventRetried, builds.EventRetryExhausted}

func (u *UI) twoPhaseData(r *http.Request) (twoPhaseData, error) {
	ctx := r.Context()
	d := twoPhaseData{Window: views.RecentWindow, AckTTL: u.svc.Config().AckTTL}
	waiting, total, err := u.svc.Jobs(ctx, builds.StatusWaiting, builds.Page{Page: 1, PerPage: 100})
	if err != nil {
		return d, err
	}
	d.WaitingTotal = total
	now := u.now()
	for _, v := range waiting {
		row := waitingRow{JobView: v}
		if v.AckDeadline != nil {
			row.Left = max(v.AckDeadline.Sub(now), 0)
		}
		d.Waiting = append(d.Waiting, row)
	}
	recent, err := u.views.RecentEvents(ctx, recentTypes, 30)
	if err != nil {
		return d, err
	}
	for _, e := range recent {
		d.Recent = append(d.Recent, recentRow{BuildEvent: e, Detail: detailText(e.Detail)})
	}
	if d.Latency, err = u.views.AckLatencies(ctx); err != nil {
		return d, err
	}
	if u.flags != nil {
		f, err := u.flags.Feature(ctx, twoPhaseFlag)
		if err != nil {
			return d, err
		}
		d.Flag = &f
	}
	return d, nil
}

func (u *UI) twoPhasePage(w http.ResponseWriter, r *http.Request) {
	d, err := u.twoPhaseData(r)
	if err != nil {
		u.fail(w, r, err)
		return
	}
	v := view{Title: "Two-phase commit", Nav: "two_phase", Live: "pipelines", Data: d}
	if wantsFragment(r) {
		u.fragment(w, r, "two_phase", "live", v)
		return
	}
	u.render(w, r, http.StatusOK, "two_phase", v)
}

// twoPhaseFlag changes one gate of the flag, as POST /api/v4/features/:name does, and
// records it in the audit log the same way.
func (u *UI) twoPhaseFlag(w http.ResponseWriter, r *http.Request) {
	if u.flags == nil {
		u.errorPage(w, r, http.StatusNotImplemented, "The configured flag provider is managed outside jobapi.")
		return
	}
	ctx := r.Context()
	op := r.PostFormValue("op")
	actorID := r.PostFormValue("actor_id")
	detail := map[string]any{}
	var err error
	var notice string
	switch op {
	case "enable", "disable":
		on := op == "enable"
		detail["value"] = on
		err = u.flags.SetBoolean(ctx, twoPhaseFlag, on)
		notice = "two_phase_off"
		if on {
			notice = "two_phase_on"
		}
	case "project_on", "project_off", "runner_on", "runner_off":
		kind, state, _ := strings.Cut(op, "_")
		on := state == "on"
		id, perr := strconv.ParseInt(actorID, 10, 64)
		if perr != nil || id <= 0 {
			u.flagRefused(w, r, fmt.Sprintf("The %s must be a positive id.", kind))
			return
		}
		a := kind + ":" + strconv.FormatInt(id, 10)
		detail["actor"], detail["value"] = a, on
		err = u.flags.SetActor(ctx, twoPhaseFlag, a, on)
		notice = "two_phase_gate_shut"
		if on {
			notice = "two_phase_gate_open"
		}
	case "percentage":
		pct, perr := strconv.Atoi(r.PostFormValue("percentage"))
		if perr != nil || pct < 0 || pct > 100 {
			u.flagRefused(w, r, "The percentage must be a whole number from 0 to 100.")
			return
		}
		detail["percentage_of_actors"] = pct
		err = u.flags.SetPercentage(ctx, twoPhaseFlag, pct)
		notice = "two_phase_percentage"
	case "delete":
		err = u.flags.Delete(ctx, twoPhaseFlag)
		notice = "two_phase_deleted"
		if err == nil {
			u.audit.FeatureDeleted(ctx, twoPhaseFlag)
		}
	default:
		u.flagRefused(w, r, "Unknown change.")
		return
	}
	if errors.Is(err, ErrFlagInvalid) {
		u.flagRefused(w, r, err.Error())
		return
	}
	if err != nil {
		u.fail(w, r, err)
		return
	}
	if op != "delete" {
		u.audit.FeatureSet(ctx, twoPhaseFlag, detail)
	}
	http.Redirect(w, r, withNotice("/two_phase", notice), http.StatusSeeOther)
}

func (u *UI) flagRefused(w http.ResponseWriter, r *http.Request, msg string) {
	d, err := u.twoPhaseData(r)
	if err != nil {
		u.fail(w, r, err)
		return
	}
	u.render(w, r, http.StatusBadRequest, "two_phase", view{Title: "Two-phase commit", Nav: "two_phase", Alert: msg, Data: d})
}
