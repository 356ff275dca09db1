package featureflags

// Flag keys. A key is the flag's name in every provider (the Postgres table, a flagd file), so
// renaming one is a migration, not a refactor.
const (
	// AllowRunnerJobAcknowledgement gates two-phase job commit (SPEC §4). GitLab's name, so
	// operators can reuse their curl habits.
	AllowRunnerJobAcknowledgement = "allow_runner_job_acknowledgement"
)

// Keys lists every flag jobapi evaluates, for metrics and operator listings.
var Keys = []string{AllowRunnerJobAcknowledgement}

// Evaluation context attribute names. Providers read them, so they live next to the keys.
// The targeting key is always the project id, as a decimal string.
const (
	AttrRunnerID              = "runner_id"                // decimal string
	AttrRunnerManagerSystemID = "runner_manager_system_id" // the runner's system_id
)
