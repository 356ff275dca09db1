// Package ciconfig turns .gitlab-ci.yml text into the jobs of a pipeline as GitLab makes
// them. It is pure: text and a Context in, builds.JobDefinition values out; no storage,
// no transport. Handlers call Compile to create a pipeline and Lint for /ci/lint.
//
// The way through, in GitLab's order (lib/gitlab/ci/config.rb):
//
//	parseYAML          text → value tree: YAML 1.1 scalars as Psych reads them, anchors and
//	                   merge keys applied, repeated keys (the last wins), !reference kept;
//	                   size, depth and alias expansion bounded
//	resolveIncludes    include: local and remote files through Context.Includes, nested
//	                   (each file once, 150 files, 100 levels, 8 MiB and MaxNodes values
//	                   in all, spent as each file is read), deep-merged in order with
//	                   the including file on top (External::Processor)
//	resolveExtends     extends: bases deep-merged in order, the entry on top (≤ 11 levels)
//	resolveReferences  !reference [a, b] replaced by what it names, after extends
//	mergedYAML         the result printed, as GitLab's lint shows it (merged_yaml)
//	readTop, readJob   every key checked and typed; default: and inherit: applied;
//	                   parallel: expanded into copies; hidden jobs (.name) skipped
//	checkGraph         needs and dependencies: names, stages, cycles (before any rule)
//	pipeline           for one Context: workflow:rules, then each job's rules; needs on
//	                   jobs rules removed; dependencies resolved; stage order
//
// Every mistake in the file is an *Error naming the job and key, with the line when the
// YAML gives one; a key jobapi does not support is such an error too, never dropped.
//
// Supported keys, and those refused with a 400 naming them:
//
//	top level   stages, types (old name), default, variables, workflow (rules), image,
//	            services, before_script, after_script, cache (old globals = default:)
//	            include (local: the repository at the pipeline's commit, wildcards *, ?,
//	            **/, [..], {a,b} as GitLab's fnmatch; remote: https, 1 MiB, 10 s, no
//	            private addresses; a string, a hash or a list of them; include:rules
//	            with if, changes, exists and when; each file once, 150 files, 100
//	            levels)
//	            refused: include:project, include:template, include:component,
//	            include:inputs, include:integrity, spec (inputs
//	            header), workflow:name
//	workflow    rules (if, changes, exists, when, variables, auto_cancel), auto_cancel
//	            (on_new_commit conservative|interruptible|none, on_job_failure none|all;
//	            a matching rule's keys over workflow's; Result.AutoCancel, which the
//	            pipeline stores and builds acts on: CancelRedundant, cancelOnJobFailure)
//	default     image, services, before_script, after_script, tags, timeout, retry,
//	            cache, artifacts, interruptible, id_tokens; refused: hooks, identity
//	job         stage, type, script, before_script, after_script, image, services,
//	            variables, tags, timeout, retry, allow_failure, when, start_in, needs,
//	            dependencies, artifacts, cache, rules, parallel, extends, inherit,
//	            only, except (refs, variables, changes; not with rules), coverage (a /regex/, RE2,
//	            kept without its slashes; builds applies it to the log at finish),
//	            interruptible (a new pipeline on the ref may cancel the job: builds'
//	            Service.CancelRedundant, as workflow:auto_cancel:on_new_commit says),
//	            environment (a name, or name, url, action start|prepare|verify|access|
//	            stop, on_stop, deployment_tier; name and url expanded at pipeline
//	            creation, GitLab's ExpandVariables.expand: the job's, the global and
//	            predefined variables, CI_COMMIT_REF_SLUG included, an undefined one
//	            empty; the url also sees CI_ENVIRONMENT_NAME and _SLUG; on_stop must
//	            name a job of the same environment with action: stop; the runner gets
//	            CI_ENVIRONMENT_NAME, _SLUG, _URL, _ACTION, _TIER; builds/pgstore
//	            records environments and deployments; refused: auto_stop_in, kubernetes),
//	            resource_group (a string, expanded at pipeline creation as GitLab's
//	            Seed::Processable::ResourceGroup: the job's, global and predefined
//	            variables and CI_ENVIRONMENT_NAME and _SLUG; empty after expansion: no
//	            group; a key GitLab would not store is a 400; builds/pgstore lets one job
//	            of a group hold it at a time across the project's pipelines)
//	            trigger (a child pipeline: include: a path or up to 3 {local: path}
//	            of the repository or {artifact: path, job: name} of a job of an earlier
//	            stage or in needs (Context.Artifacts reads it, package downstream;
//	            include: artifact only in a child's configuration), strategy: depend,
//	            forward: yaml_variables, pipeline_variables; a trigger job takes no default: and may not have
//	            script, image, services, tags, cache, artifacts, coverage, timeout or
//	            interruptible; ChildConfig is the child's file, package downstream
//	            compiles it when the bridge is pending; refused: trigger: <project>,
//	            trigger:project, branch (multi-project), trigger:include:project,
//	            template, component, remote)
//	            id_tokens ({NAME: {aud: a string or a list of strings}}, GitLab's
//	            messages; aud kept as written, the handlers expand it and mint the
//	            JWT when a runner takes the job; not on a trigger job)
//	            refused: release,
//	            secrets, pages (the keyword; a job named pages is fine), hooks,
//	            identity, manual_confirmation, run, dast_configuration, publish
//	rules       if, changes, exists, when, allow_failure, variables, start_in, needs,
//	            interruptible (workflow:rules: if, changes, exists, when, variables,
//	            auto_cancel)
//	changes     rules:changes, a list or {paths, compare_to} (≤ 50 paths), in jobs,
//	            workflow:rules and include:rules; only/except:changes (a list). The
//	            files changed come from git (Context.Repository: cisource, the
//	            project's repo_url): without compare_to, GitLab's Pipeline#modified_paths
//	            for a push: a branch pipeline with a before_sha and a sha that are real
//	            commits compares before_sha..sha (git diff, renames as both paths); every
//	            other pipeline has no base and its changes hold: a new branch (before_sha
//	            zeros), a tag, and the API, web, schedule and trigger pipelines (GitLab's
//	            have no before_sha; jobapi compares whenever the caller gives one, as
//	            GitLab's code does). GitLab's merge request and external pull request
//	            pipelines compare with the request's diff: jobapi has no merge requests
//	            (such a source is a 400). compare_to (a branch, tag, refs/… or full sha;
//	            variables expanded) compares the merge base of it and the pipeline's
//	            commit with the commit, whatever the pipeline (a ref the repository lacks:
//	            400 "is not a valid ref"). Paths of rules:changes expand defined
//	            variables (others stay as written); only/except:changes match as written.
//	            Globs: File.fnmatch with FNM_PATHNAME | FNM_DOTMATCH | FNM_EXTGLOB (*, ?,
//	            **/, [..], {a,b}, \ escapes). An empty diff: false. Past 50,000 changed
//	            files or 50,000 comparisons (files × patterns) the clause holds, as
//	            GitLab assumes a match, with a warning (only/except:changes too, where
//	            GitLab has no limit: git stops at 50,001 names). A before_sha the
//	            repository lacks, an unreachable repository or none: a 400 naming the
//	            clause, never a silent true.
//	exists      rules:exists, a list or {paths} (≤ 50), in jobs, workflow:rules and
//	            include:rules: any file at the pipeline's commit matches (exact paths, dir/
//	            for a directory, **/*.ext as a suffix, other globs as changes'); variables
//	            expanded; past 50,000 comparisons of files × patterns (top-level files only
//	            when every glob is of the top level) it holds, with a warning. A
//	            repository over 200,000 files is a 400. refused: exists:project, ref,
//	            regexp
//	only/except an array of refs, or {refs, variables, changes}. refs: branch and tag names,
//	            /regexps/, name@project/path, branches, tags, and the pipeline sources
//	            (api, pushes, web, triggers, schedules, merge_requests: the source without
//	            _event, or its plural); variables: rules:if expressions, any one holds.
//	            A job with neither them nor rules gets only: [branches, tags] unless
//	            workflow:rules are given (GitLab's default, so not in merge request
//	            pipelines); a hash under only: without refs takes those refs too (GitLab
//	            deep-merges it over the default). refused: kubernetes
//	artifacts   paths, exclude, name, untracked, when, expire_in, reports (every report
//	            type GitLab knows, coverage_report included), expose_as (≤ 100 letters,
//	            digits, -, _ and spaces; needs paths, none with *), public and access
//	            (all|developer|none; not both; public: false is developer): the entries
//	            carry them, builds stores them with each uploaded artifact, and access:
//	            none refuses the operator's downloads (the runners of dependent jobs
//	            still fetch the archive); the pipeline and job pages show expose_as
//	            as the archive's link
//	cache       key: a string, or key:files / key:files_commits (up to two paths or
//	            patterns, not both) with key:prefix, computed from the repository at the
//	            pipeline's commit as GitLab does (Context.Repository: the SHA-1 of the
//	            files' blob ids, or of their last commits, after the prefix or the
//	            cache's index; "default" when no file exists); paths, policy, when,
//	            untracked, fallback_keys, unprotect (no effect: a warning)
//
// keys_test.go walks every key of GitLab's reference: each compiles or is such a 400.
//
// Limits: 1 MiB of text (GitLab: 2 MB), 100 levels of nesting (GitLab's max_yaml_depth),
// 500,000 values once aliases, extends and !reference are expanded (a billion-laughs
// file stops at the alias that crosses it), builds.MaxJobsPerPipeline jobs, GitLab's own
// limits on keys (retry ≤ 2, parallel ≤ 200, 50 needs, 4 caches, start_in ≤ 1 week).
//
// Where jobapi differs from GitLab on purpose: retry:when reasons jobapi never records
// (api_failure, stale_schedule, archived_failure, unmet_prerequisites,
// scheduler_failure) are dropped with a warning; variables in rules:if see the
// Context's variables (predefined, project, pipeline) over the file's, so predefined
// variables a file redefines keep the Context's value there.
package ciconfig
