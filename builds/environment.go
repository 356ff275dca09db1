package builds

// Environment is a job's `environment:` from .gitlab-ci.yml once the pipeline is created:
// Name and URL have their variables expanded (GitLab expands them at pipeline creation),
// Slug and Tier are derived from the name when the file does not give a tier.
type Environment struct {
	Name   string `json:"name"`
	Slug   string `json:"slug"`
	URL    string `json:"url,omitempty"`
	Action string `json:"action"` // one of environment.Actions; start when not given
	OnStop string `json:"on_stop,omitempty"`
	Tier   string `json:"tier"` // one of environment.Tiers
}
