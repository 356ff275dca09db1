package webui

import (
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/jobapi/jobapi/builds"
)

// TestScheduleFormValues: the edit form's checkbox (a hidden "false" before the checkbox's
// "true") turns a schedule on and off; the activate and deactivate buttons send active
// alone, which leaves every other field as it is (nil).
func TestScheduleFormValues(t *testing.T) {
	t.Parallel()
	read := func(form url.Values) (desc, cron *string, active *bool) {
		r := httptest.NewRequest("POST", "/projects/1/pipeline_schedules/2", strings.NewReader(form.Encode()))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		c := scheduleFormValues(r)
		return c.Description, c.Cron, c.Active
	}
	desc, cron, active := read(url.Values{"description": {" nightly "}, "cron": {"0 2 * * *"}, "active": {"false", "true"}})
	if desc == nil || *desc != "nightly" || cron == nil || *cron != "0 2 * * *" || active == nil || !*active {
		t.Errorf("the edit form, checked: description %v cron %v active %v", desc, cron, active)
	}
	if _, _, active := read(url.Values{"description": {"nightly"}, "active": {"false"}}); active == nil || *active {
		t.Errorf("the edit form, unchecked: active %v, want false", active)
	}
	desc, cron, active = read(url.Values{"active": {"false"}})
	if desc != nil || cron != nil || active == nil || *active {
		t.Errorf("the deactivate button: description %v cron %v active %v, want only active false", desc, cron, active)
	}
}

// TestVariableFormChange: a new variable always takes its value (empty too, which the
// service refuses by its own rule); an edit with an empty value keeps the stored one, which
// is how a masked value is kept without ever being put on the page.
func TestVariableFormChange(t *testing.T) {
	t.Parallel()
	c := variableForm{Key: "K", Value: "", File: true}.change()
	if c.Value == nil || *c.Value != "" || *c.VariableType != builds.VariableFile || *c.Masked || *c.Protected {
		t.Errorf("a new variable's change: %+v", c)
	}
	if c := (variableForm{Key: "K", Existing: true, Masked: true}).change(); c.Value != nil || !*c.Masked {
		t.Errorf("an edit without a value: value %v, want nil (kept)", c.Value)
	}
	if c := (variableForm{Key: "K", Value: "new-value-1", Existing: true}).change(); c.Value == nil || *c.Value != "new-value-1" || *c.VariableType != builds.VariableEnv {
		t.Errorf("an edit with a value: %+v", c)
	}
}
