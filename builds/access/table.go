package access

import (
	"fmt"
	"strings"
)

// Action is something a caller asks to do on a project (or on the instance).
type Action string

// The actions jobapi has. Each has one row in Table; a route declares the one it needs.
const (
	ReadProject           Action = "read_project"
	LeaveProject          Action = "leave_project"
	ReadPipelines         Action = "read_pipelines"
	ReadJobLogs           Action = "read_job_logs"
	ReadArtifacts         Action = "read_artifacts"
	ReadEnvironments      Action = "read_environments"
	ReadSchedules         Action = "read_schedules"
	ReadPipelineVariables Action = "read_pipeline_variables"
	ReadVariables         Action = "read_variables"
	WriteVariables        Action = "write_variables"
	ReadProtectedRefs     Action = "read_protected_refs"
	RunPipeline           Action = "run_pipeline"
	RetryJob              Action = "retry_job"
	CancelJob             Action = "cancel_job"
	PlayJob               Action = "play_job"
	ManageSchedules       Action = "manage_schedules"

	ReadProtectedVariables  Action = "read_protected_variables"
	WriteProtectedVariables Action = "write_protected_variables"
	ManageTriggers          Action = "manage_triggers"
	ManageHooks             Action = "manage_hooks"
	ManageEnvironments      Action = "manage_environments"
	ManageProtectedRefs     Action = "manage_protected_refs"
	ReadProjectRunners      Action = "read_project_runners"
	ManageMembers           Action = "manage_members"
	UpdateProject           Action = "update_project"
	DeleteArtifacts         Action = "delete_artifacts"

	DeletePipeline Action = "delete_pipeline"
	ManageOwners   Action = "manage_owners"
	DeleteProject  Action = "delete_project"

	// ListProjects is any signed-in caller's: the list holds the caller's projects only.
	ListProjects Action = "list_projects"
	// ReadInstance and ManageInstance are the instance's: its runners, projects' creation,
	// feature flags, the audit log, every pipeline and job.
	ReadInstance   Action = "read_instance"
	ManageInstance Action = "manage_instance"
	// The instance's runners are the instance's too, but GitLab lets a token with only a
	// runner scope at them (create_runner, manage_runner): their rows name those scopes.
	CreateRunner  Action = "create_runner"
	ReadRunners   Action = "read_runners"
	ManageRunners Action = "manage_runners"
)

// Rule is one row of the table: the least role an action needs, and what it covers.
type Rule struct {
	Action Action
	// Min is the least member level; NoAccess for an instance action any caller may take.
	Min Level
	// AdminOnly actions are the instance's: no member level is enough.
	AdminOnly bool
	// Write actions change something: a token needs the api scope for them; a read needs
	// api or read_api (GitLab's scopes).
	Write bool
	// Scopes are token scopes that suffice for the action besides api (and read_api for a
	// read): GitLab's runner scopes for the runner actions.
	Scopes []string
	// RefRule actions act on a ref: on a protected branch or tag they also need the ref's
	// own permission (ProtectedRefAllows).
	RefRule bool
	// Covers says what the action is, in the words of the README's table.
	Covers string
}

// Table is who may do what: one row per action, following GitLab's permissions page
// ("Roles and permissions", Project CI/CD) for the actions jobapi has. Where jobapi differs
// from GitLab the row says why in a comment. Admins (the admin token, an admin user in
// admin mode) may do everything.
var Table = []Rule{
	{Action: ReadProject, Min: Guest, Covers: "see the project and its members"},
	// GitLab's "leave project": any member may end its own membership (DELETE of itself
	// from /projects/:id/members), except the last owner, who would leave it ownerless.
	{Action: LeaveProject, Min: Guest, Write: true, Covers: "leave the project (not its last owner)"},
	// GitLab lets guests of a private project see pipelines, jobs, logs and artifacts when
	// project-based pipeline visibility is on, its default; jobapi has no such switch.
	{Action: ReadPipelines, Min: Guest, Covers: "read pipelines, jobs, test reports, commit statuses"},
	{Action: ReadJobLogs, Min: Guest, Covers: "read job logs"},
	{Action: ReadArtifacts, Min: Guest, Covers: "download and browse artifacts"},
	{Action: ReadEnvironments, Min: Reporter, Covers: "read environments, deployments, resource groups"},
	{Action: ReadSchedules, Min: Reporter, Covers: "read pipeline schedules"},
	{Action: ReadPipelineVariables, Min: Developer, Covers: "read a pipeline's variables"},
	// GitLab keeps every project variable to maintainers. jobapi lets developers read and
	// write the unprotected ones: any job a developer runs on an unprotected ref sees them
	// anyway; protected ones reach only protected refs, which is why they stay maintainers'.
	{Action: ReadVariables, Min: Developer, Covers: "read unprotected CI/CD variables"},
	{Action: WriteVariables, Min: Developer, Write: true, Covers: "write unprotected CI/CD variables"},
	{Action: ReadProtectedRefs, Min: Developer, Covers: "read protected branches and tags"},
	{Action: RunPipeline, Min: Developer, Write: true, RefRule: true, Covers: "run a pipeline, lint CI config"},
	{Action: RetryJob, Min: Developer, Write: true, RefRule: true, Covers: "retry a job or a pipeline"},
	{Action: CancelJob, Min: Developer, Write: true, RefRule: true, Covers: "cancel a job or a pipeline"},
	{Action: PlayJob, Min: Developer, Write: true, RefRule: true, Covers: "play a manual job"},
	// A schedule runs on its ref as no one in particular: making, changing or playing one on
	// a protected ref needs that ref's permission, as GitLab asks of a schedule's owner.
	{Action: ManageSchedules, Min: Developer, Write: true, RefRule: true, Covers: "create, change, play, delete schedules"},
	{Action: ReadProtectedVariables, Min: Maintainer, Covers: "read protected variables"},
	{Action: WriteProtectedVariables, Min: Maintainer, Write: true, Covers: "write protected variables"},
	{Action: ManageTriggers, Min: Maintainer, Write: true, Covers: "manage trigger tokens"},
	{Action: ManageHooks, Min: Maintainer, Write: true, Covers: "manage webhooks"},
	{Action: ManageEnvironments, Min: Maintainer, Write: true, Covers: "change environments and resource groups"},
	{Action: ManageProtectedRefs, Min: Maintainer, Write: true, Covers: "protect and unprotect branches and tags"},
	{Action: ReadProjectRunners, Min: Maintainer, Covers: "see the project's runners"},
	{Action: ManageMembers, Min: Maintainer, Write: true, Covers: "add, change, remove members below owner"},
	{Action: UpdateProject, Min: Maintainer, Write: true, Covers: "change project and push settings"},
	{Action: DeleteArtifacts, Min: Maintainer, Write: true, Covers: "delete job artifacts"},
	{Action: DeletePipeline, Min: Owner, Write: true, Covers: "delete pipelines"},
	{Action: ManageOwners, Min: Owner, Write: true, Covers: "add, change, remove owners"},
	{Action: DeleteProject, Min: Owner, Write: true, Covers: "delete the project"},
	{Action: ListProjects, Min: NoAccess, Covers: "list projects (a user sees its own)"},
	{Action: ReadInstance, AdminOnly: true, Covers: "see every pipeline and job, users, flags and the audit log"},
	{Action: ManageInstance, AdminOnly: true, Write: true, Covers: "create projects, manage users and flags"},
	{Action: CreateRunner, AdminOnly: true, Write: true, Scopes: []string{ScopeCreateRunner}, Covers: "create instance runners"},
	{Action: ReadRunners, AdminOnly: true, Scopes: []string{ScopeManageRunner}, Covers: "see the instance's runners"},
	{Action: ManageRunners, AdminOnly: true, Write: true, Scopes: []string{ScopeManageRunner}, Covers: "change, delete, reset instance runners"},
}

var rules = func() map[Action]Rule {
	m := make(map[Action]Rule, len(Table))
	for _, r := range Table {
		if _, dup := m[r.Action]; dup {
			panic("access.Table: two rows for " + r.Action)
		}
		m[r.Action] = r
	}
	return m
}()

// RuleOf returns an action's row; it panics for an action without one, which is a
// programming error a route's declaration would otherwise hide until a request came.
func RuleOf(a Action) Rule {
	r, ok := rules[a]
	if !ok {
		panic(fmt.Sprintf("access: action %q has no row in Table", a))
	}
	return r
}

// TableMarkdown renders Table by role, as README.md shows it: each role with what it adds
// to the roles below it.
func TableMarkdown() string {
	var b strings.Builder
	b.WriteString("| role | may, besides what the rows above it may |\n|---|---|\n")
	row := func(who string, keep func(Rule) bool) {
		var covers []string
		for _, r := range Table {
			if keep(r) {
				c := r.Covers
				if r.RefRule {
					c += "¹"
				}
				if len(r.Scopes) > 0 {
					c += " (a token may have the " + strings.Join(r.Scopes, " or ") + " scope instead of api)"
				}
				covers = append(covers, c)
			}
		}
		if len(covers) > 0 {
			fmt.Fprintf(&b, "| %s | %s |\n", who, strings.Join(covers, "; "))
		}
	}
	row("any user", func(r Rule) bool { return !r.AdminOnly && r.Min == NoAccess })
	for _, l := range Levels {
		row(fmt.Sprintf("%s (%d)", l.Title(), l), func(r Rule) bool { return !r.AdminOnly && r.Min == l })
	}
	row("admin", func(r Rule) bool { return r.AdminOnly })
	return b.String()
}
