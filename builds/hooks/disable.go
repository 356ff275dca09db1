package hooks

import "time"

// Auto-disabling, as GitLab does it ("Auto-disabled webhooks"): a hook whose deliveries
// fail (no answer, or not 2xx) DisableAfter times in a row is temporarily disabled, for
// Sender.DisableBackoff after that failure, doubled after each further one up to
// maxDisableBackoff; after PermanentlyDisableAfter in a row it is disabled until an
// operator edits it or a test delivery succeeds. While disabled no request is made for it:
// its deliveries that fall due are given up unsent (GitLab does not send them either), so a
// receiver that comes back is not flooded with the events of its outage.
const (
	DisableAfter            = 4
	PermanentlyDisableAfter = 40
	DefaultDisableBackoff   = time.Minute
	maxDisableBackoff       = 24 * time.Hour
)

// GitLab's alert_status values.
const (
	AlertExecutable          = "executable"
	AlertTemporarilyDisabled = "temporarily_disabled"
	AlertDisabled            = "disabled"
)

// Alert is the hook's alert_status at now, and until when it is temporarily disabled.
func (h Hook) Alert(now time.Time) (string, *time.Time) {
	switch {
	case h.RecentFailures >= PermanentlyDisableAfter:
		return AlertDisabled, nil
	case h.DisabledUntil != nil && now.Before(*h.DisabledUntil):
		return AlertTemporarilyDisabled, h.DisabledUntil
	}
	return AlertExecutable, nil
}

// disableBackoff is how long a hook is disabled after its failures-th failure in a row (0:
// not disabled).
func disableBackoff(base time.Duration, failures int) time.Duration {
	if failures < DisableAfter {
		return 0
	}
	d := base
	for i := DisableAfter; i < failures && d < maxDisableBackoff; i++ {
		d *= 2
	}
	return min(d, maxDisableBackoff)
}
