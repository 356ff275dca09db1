package webui

// notices are the one-off messages a page shows after an action redirected to it. The
// redirect names one by its code (?notice=runner_paused): a link from anywhere can make a
// page show one of these and nothing else. Arbitrary text taken from the query would let a
// crafted link put its own words ("your token expired, send it to …") on jobapi's page.
var notices = map[string]string{
	"pipeline_canceled":    "Pipeline canceled.",
	"pipeline_created":     "Pipeline created.",
	"job_canceled":         "Job canceled.",
	"job_cancel_requested": "Cancel requested: the runner stops the job at its next update.",
	"job_retried":          "Job retried.",
	"job_started":          "Job started.",
	"runner_paused":        "Runner paused: it takes no new jobs.",
	"runner_resumed":       "Runner resumed.",
	"runner_deleted":       "Runner deleted; the jobs it held were ended.",
	"trigger_deleted":      "Trigger token deleted: it starts no pipeline any more.",
	"schedule_created":     "Pipeline schedule created.",
	"schedule_updated":     "Pipeline schedule saved.",
	"schedule_activated":   "Pipeline schedule activated: it runs next at its next time.",
	"schedule_deactivated": "Pipeline schedule deactivated: it runs no more until activated.",
	"schedule_deleted":     "Pipeline schedule deleted.",
	"schedule_played":      "Pipeline schedule played: this is its pipeline.",
	"variable_created":     "Variable added.",
	"variable_updated":     "Variable saved.",
	"variable_deleted":     "Variable deleted.",
	"two_phase_off":        "Two-phase commit is off for everyone." + everyReplica,
	"two_phase_on":         "Two-phase commit is on for every project." + everyReplica,
	"two_phase_gate_open":  "Gate opened." + everyReplica,
	"two_phase_gate_shut":  "Gate closed." + everyReplica,
	"two_phase_percentage": "Percentage of projects changed." + everyReplica,
	"two_phase_deleted":    "The flag and all its gates were removed: two-phase commit is off." + everyReplica,
}

const everyReplica = " Every replica applies it within seconds."

// withNotice is path with the notice named by code; code must be a key of notices.
func withNotice(path, code string) string {
	if _, ok := notices[code]; !ok {
		panic("webui: unknown notice " + code) // a typo in a redirect, caught by any test of it
	}
	return path + "?notice=" + code
}

// noticeText is the message of a ?notice= code; an unknown code shows nothing.
func noticeText(code string) string { return notices[code] }
