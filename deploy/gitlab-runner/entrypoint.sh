#!/bin/bash
# Entrypoint of docker-compose.yml's gitlab-runner service: the official gitlab-runner image,
# unmodified, as a fleet of one for jobapi. On start it registers with jobapi's registration
# token (unless its config already holds a runner, after a restart) and runs; on stop it lets
# running jobs finish, then unregisters. A runner registered with a registration token has a
# glrtr- token, so `gitlab-runner unregister` deletes it in jobapi (DELETE /api/v4/runners):
# a stopped fleet leaves no runner behind.
#
# Settings (environment):
#   REGISTRATION_TOKEN  jobapi's JOBAPI_RUNNER_REGISTRATION_TOKEN (required; gitlab-runner
#                       register reads this variable itself)
#   CI_SERVER_URL       jobapi's URL as the runner reaches it (default http://jobapi:8080)
#   RUNNER_NAME         the runner's description (default: compose-shell-<hostname>)
#   RUNNER_TAG_LIST     comma-separated tags; none: the runner takes untagged jobs
#   RUNNER_USER         user the shell executor runs jobs as (default gitlab-runner; empty:
#                       this script's user)
#   RUNNER_WORKING_DIRECTORY  where jobs' builds/ live (default /home/gitlab-runner, as the
#                       image's own command)
#   DRAIN_TIMEOUT       seconds to wait for running jobs on stop before aborting them (120)
#   GITLAB_RUNNER       the gitlab-runner binary (default: gitlab-runner from PATH)
#   CONFIG_FILE         config.toml (gitlab-runner's own variable; default
#                       /etc/gitlab-runner/config.toml for root)
set -euo pipefail

: "${REGISTRATION_TOKEN:?set REGISTRATION_TOKEN to the JOBAPI_RUNNER_REGISTRATION_TOKEN of jobapi}"
export CI_SERVER_URL="${CI_SERVER_URL:-http://jobapi:8080}"
RUNNER_NAME="${RUNNER_NAME:-compose-shell-$(hostname)}"
RUNNER_USER="${RUNNER_USER-gitlab-runner}"
RUNNER_WORKING_DIRECTORY="${RUNNER_WORKING_DIRECTORY:-/home/gitlab-runner}"
DRAIN_TIMEOUT="${DRAIN_TIMEOUT:-120}"
GITLAB_RUNNER="${GITLAB_RUNNER:-gitlab-runner}"
config="${CONFIG_FILE:-/etc/gitlab-runner/config.toml}"

# A config that still holds a runner (the container restarted without a clean stop) keeps
# it; otherwise register one. --non-interactive takes every answer from flags: the
# registration token makes it POST /api/v4/runners (an untagged runner when no tags).
if ! grep -qs '^[[:space:]]*token[[:space:]]*=' "$config"; then
  "$GITLAB_RUNNER" register --non-interactive --config "$config" \
    --url "$CI_SERVER_URL" \
    --registration-token "$REGISTRATION_TOKEN" \
    --description "$RUNNER_NAME" \
    --tag-list "${RUNNER_TAG_LIST:-}" \
    --executor shell
fi

run_args=(run --config "$config" --working-directory "$RUNNER_WORKING_DIRECTORY")
if [ -n "$RUNNER_USER" ]; then
  run_args+=(--user "$RUNNER_USER")
fi

runner=""
stop() {
  trap - TERM INT QUIT
  if [ -n "$runner" ]; then
    # SIGQUIT is gitlab-runner's graceful stop: no new jobs, running ones finish. (Go
    # installs its SIGQUIT handler even though bash starts background jobs with it ignored.)
    kill -QUIT "$runner" 2>/dev/null || true
    for _ in $(seq "$DRAIN_TIMEOUT"); do
      kill -0 "$runner" 2>/dev/null || break
      sleep 1
    done
    # Still busy: SIGTERM aborts the jobs (jobapi fails them when the runner is deleted).
    kill -TERM "$runner" 2>/dev/null || true
    wait "$runner" || true
  fi
  "$GITLAB_RUNNER" unregister --config "$config" --all-runners
  exit 0
}
trap stop TERM INT QUIT

"$GITLAB_RUNNER" "${run_args[@]}" &
runner=$!
# wait returns early when a trapped signal arrives; stop then takes over. A runner that
# exits by itself ends the container (compose restarts it; the config keeps the runner).
wait "$runner"
