// Package runnerclient plays the runner side of the GitLab v4 API the way
// gitlab-runner 19.4 (shell executor) does, so jobapi's tests, load tool and
// demo can drive the server exactly like the real binary would.
//
// It deliberately does not import any jobapi package: its wire structs mirror
// gitlab-runner's own (common.JobRequest, common.UpdateJobRequest and a subset
// of spec.Job) with the same JSON names, types and omitempty rules, so a
// server that drifts from what the runner sends or decodes fails here too.
//
// The life of a job, as `gitlab-runner run` sees it:
//
//	RequestJob ──201──▶ ack: UpdateJob(running)
//	                      │  403/404, Job-Status failed|canceled, no response ─▶ dropped, nothing more sent
//	                      │  Job-Status canceling ─▶ final update failed/job_canceled
//	                      ▼  anything else (even 409) ─▶ the job runs
//	                    steps ── PatchTrace every update interval, a "touch"
//	                      │      (UpdateJob running) after 30 s without one
//	                      ▼
//	                    final update: UpdateJob(success|failed) after sending all trace;
//	                    200 done, 202 wait and resend, 412 resend the whole trace,
//	                    403/404 give up quietly, other codes retried up to 10 times
//
// RunJob does all of that; Verify, RequestJob, UpdateJob, PatchTrace and
// Keepalive are the single calls, for tests that want to take a step at a time.
//
// Where a behaviour is taken from the runner, the comment names the runner
// function it mirrors; the shared runner-wire-format.md has the details.
package runnerclient
