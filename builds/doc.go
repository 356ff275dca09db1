// Package builds is jobapi's domain: build states and the rules that move a build between
// them, the auto-retry policy, pipeline definitions, and the Service that the HTTP handlers
// and background workers call. It imports only the standard library and two leaves, gitref
// (git's ref rules) and environment (GitLab's environment rules); Postgres and Redis live
// behind the Store and Leases interfaces it declares (see builds/pgstore and
// builds/redisstore).
//
// States (SPEC §3):
//
//	created ──released¹───────▶ pending ──claim, one-phase───────────────────────────────▶ running ──final update──▶ success | failed
//	 │  ▲                         │  └──claim, two-phase──▶ waiting_for_runner_ack ──ack───┘ │  │
//	 │  │                         │                           │ decline, ack timeout         │  └──operator cancel──▶ canceling
//	 │  │ retry or play of a      │ stuck_pending reaper      ▼                              │                          │ final update,
//	 │  │ job it waits for        └─────────────────────────▶ failed ◀──reapers, trace limit─┘                          │ reaper
//	 ▼  │                                                     └──auto-retry──▶ new attempt, pending                     ▼
//	skipped  (ruled out by its predecessors¹)                                                                       canceled
//	created ──released¹, when: manual──▶ manual ──operator play──▶ pending
//	created ──released¹, when: delayed──▶ scheduled ──scheduled_at passed (due pass)──▶ pending
//	created | manual | scheduled | pending | waiting_for_runner_ack ──operator cancel──▶ canceled
//	success | failed | canceled ──operator retry──▶ new attempt, pending
//	stuck stage²: pessimistic fails what it waits for (canceling ends canceled); optimistic leaves it behind
//
// Every transition, declared in BuildTransitions and PipelineTransitions (docs/state-machine.md
// carries the same table; tests keep the copies equal):
//
//	build from                                             | trigger                                                        | to        | event                | failure_reason
//	-------------------------------------------------------+----------------------------------------------------------------+-----------+----------------------+---------------------------------------
//	(new)                                                  | pipeline created, nothing to wait for¹                         | pending   | queued               | -
//	(new)                                                  | pipeline created, waits for its predecessors¹                  | created   | created              | -
//	(new)                                                  | pipeline created, when: manual, nothing to wait for            | manual    | manual               | -
//	(new)                                                  | pipeline created, when: delayed, nothing to wait for           | scheduled | scheduled            | -
//	(new)                                                  | pipeline created, ruled out at once¹ (on_failure)              | skipped   | skipped              | -
//	(new)                                                  | pipeline created, a resource_group job⁴, nothing to wait for   | resource  | waiting_for_resource | -
//	(new)                                                  | retry (auto or operator): the new attempt                      | pending   | queued               | -
//	(new)                                                  | retry of a resource_group job⁴: the new attempt                | resource  | waiting_for_resource | -
//	(new)                                                  | pipeline retry: the new attempt, waiting its turn¹             | created   | created              | -
//	created                                                | released: its predecessors finished¹                           | pending   | queued               | -
//	created                                                | released, a resource_group job⁴                                | resource  | waiting_for_resource | -
//	created                                                | released, when: manual                                         | manual    | manual               | -
//	created                                                | released, when: delayed (at now + start_in)                    | scheduled | scheduled            | -
//	created                                                | ruled out by its predecessors¹                                 | skipped   | skipped              | -
//	manual                                                 | operator plays it (POST …/play)                                | pending   | played               | -
//	manual                                                 | operator plays a resource_group job⁴                           | resource  | played               | -
//	scheduled                                              | due pass: its scheduled_at passed                              | pending   | queued               | -
//	scheduled                                              | due pass, a resource_group job⁴                                | resource  | waiting_for_resource | -
//	resource                                               | its resource group is free and assigned to it⁴                 | pending   | queued               | -
//	created, manual, scheduled, resource, pending, waiting | operator cancels the job or pipeline, or auto-cancel⁶          | canceled  | canceled             | -
//	pending                                                | claimed by a runner, one-phase                                 | running   | assigned             | -
//	pending                                                | claimed by a runner, two-phase                                 | waiting   | assigned             | -
//	pending                                                | reaper: pending too long                                       | failed    | dropped_stuck        | stuck_pending
//	pending                                                | bridge⁵: its child pipeline created, strategy: depend          | running   | downstream_created   | -
//	pending                                                | bridge⁵: its child pipeline created                            | success   | downstream_created   | -
//	pending                                                | bridge⁵: the child's configuration is invalid                  | failed    | downstream_failed    | downstream_pipeline_creation_failed
//	pending                                                | bridge⁵: its pipeline is nested too deep                       | failed    | downstream_failed    | reached_max_descendant_pipelines_depth
//	running                                                | bridge⁵, depend: its child succeeded                           | success   | downstream_finished  | -
//	running                                                | bridge⁵, depend: its child failed                              | failed    | downstream_finished  | unknown_failure
//	running, canceling                                     | bridge⁵, depend: its child canceled (or ended while canceling) | canceled  | downstream_finished  | -
//	pending, waiting, running                              | stuck stage², pessimistic                                      | failed    | stuck_stage          | stuck_or_timeout_failure
//	pending, waiting, running, canceling                   | stuck stage², optimistic (left behind)                         | (same)    | stuck_stage          | -
//	waiting                                                | runner acks (PUT state=running)                                | running   | acknowledged         | -
//	waiting                                                | runner keep-alive (PUT state=pending)                          | (same)    | keepalive            | -
//	waiting                                                | runner declines (PUT state=failed)                             | failed    | declined             | (runner's)
//	waiting                                                | ack sweeper: key expired or max wait passed                    | failed    | ack_timeout          | runner_provisioning_timeout
//	waiting                                                | ack sweeper: key alive, deadline moved                         | (same)    | -                    | -
//	running                                                | final update (PUT state=success)                               | success   | finished             | -
//	running                                                | final update (PUT state=failed)³                               | failed    | finished             | (runner's)
//	running, canceling                                     | runner update or trace (liveness)                              | (same)    | -                    | -
//	running, canceling                                     | trace over the size limit                                      | failed    | trace_size_exceeded  | trace_size_exceeded
//	running                                                | reaper: running without updates                                | failed    | dropped_stuck        | no_updates_running
//	running                                                | reaper: running past timeout + grace                           | failed    | dropped_stuck        | job_execution_timeout
//	waiting, running                                       | its runner deleted (operator or unregister)                    | failed    | runner_deleted       | runner_system_failure
//	running                                                | operator cancels the job or pipeline, or auto-cancel⁶          | canceling | cancel_requested     | -
//	canceling                                              | final update (PUT success or failed)                           | canceled  | finished             | -
//	canceling                                              | operator force-cancels it (POST …/cancel?force=true)           | canceled  | force_canceled       | -
//	canceling                                              | reaper: canceling without updates                              | canceled  | dropped_stuck        | -
//	canceling                                              | stuck stage², pessimistic                                      | canceled  | stuck_stage          | -
//	canceling                                              | its runner deleted                                             | canceled  | runner_deleted       | -
//	failed                                                 | auto-retry allowed (new attempt queued)                        | (same)    | retried              | -
//	failed                                                 | auto-retry limit reached                                       | (same)    | retry_exhausted      | -
//	success, failed, canceled                              | operator retry (new attempt queued)                            | (same)    | retried              | -
//	skipped                                                | operator retries or plays a job it waits for                   | created   | reopened             | -
//	waiting = waiting_for_runner_ack; resource = waiting_for_resource; (same): no state
//	change; (runner's): the PUT's failure_reason, else unknown_failure (final update) or
//	runner_system_failure (decline).
//	¹ Predecessors: the jobs it needs (needs:), else every job of the earlier stages. As in
//	GitLab, on_success, manual and delayed jobs run once they succeeded (a stage job also
//	when they were skipped), on_failure ones once one failed, always ones unless one was
//	canceled; others are skipped, and so is a DAG job one of whose needs was skipped or is
//	an optional manual job not played. A failure with allow_failure is a success here.
//	² Stuck: a pending or running pipeline none of whose builds changed state for the
//	stuck timeout. It waits for the unfinished builds of its first unfinished stage, or in a
//	pipeline with needs or when for every pending, waiting, running or canceling build not
//	left behind, whatever its stage. Manual and scheduled builds are never waited for, and
//	a pipeline in status manual or scheduled is never stuck: a delayed job counts once its
//	time has come and it is pending.
//	³ An exit code listed in allow_failure: exit_codes sets the build's allow_failure.
//	⁴ A job with resource_group holds its group from pending until it ends (pending,
//	waiting, running, canceling: a unique index allows one such build per group), across
//	the project's pipelines. Whatever frees a group (an end by any path, a cancel) assigns
//	it in the same transaction to the next job of its process_mode: unordered, the longest
//	waiting; oldest_first and newest_first, the first upcoming job (created, scheduled or
//	waiting) by pipeline id up or down, if it is waiting; newest_ready_first, the waiting
//	job of the newest pipeline. A pass on every replica assigns free groups left behind.
//	⁵ A bridge (trigger:) never goes to a runner: the bridge pass creates its child pipeline,
//	and the transaction that ends the child ends a depend bridge. The reapers and the stuck
//	check leave a running bridge alone; cancelling its pipeline cancels the child.
//	⁶ Auto-cancel (workflow:auto_cancel) takes the operator's pipeline cancel path: a newer
//	pipeline on the ref cancels an older one whole (on_new_commit: conservative) or its
//	interruptible builds (interruptible); a build that fails for good cancels the rest of its
//	pipeline (on_job_failure: all) right after its finish commits, a pass being the net.
//
//	pipeline from                       | trigger                                     | to
//	------------------------------------+---------------------------------------------+-----------------
//	(new)                               | pipeline created                            | pending
//	pending                             | a build assigned; or one ended, others left | running
//	running                             | its only started build retried, none ended  | pending
//	pending, running, scheduled         | nothing runs, a blocking manual job waits   | manual
//	pending, running, manual            | nothing runs, a delayed job waits           | scheduled
//	manual, scheduled                   | a job played, come due or retried           | pending, running
//	pending, running, manual, scheduled | all latest attempts ended, all succeeded*   | success
//	pending, running, manual, scheduled | all ended, one failed (no allow_failure)    | failed
//	pending, running, manual, scheduled | all ended, one canceled, none failed*       | canceled
//	success, failed, canceled           | operator retries or plays one of its builds | pending, running
//	* allow_failure failures count as succeeded, optional manual jobs (allow_failure) not
//	played as nothing. Pipelines record no events: a change writes updated_at and
//	progressed_at, and finished_at when it ends.
//
// The decisions are plain functions here (PipelineStatus, PlanAdvance for stage pipelines,
// PlanJobs for those with needs or when, DecideAutoRetry, DecideExpiredAck, PlanStuckStage,
// WaitedFor, ReapParams.Rules); the store carries out what they decide. Postgres holds the state of record and every transition is a compare-and-set
// (UPDATE … WHERE status = expected). Redis holds the ack TTL: losing it can make a
// waiting build time out early, never run twice.
//
// Job logs (livetrace.go, livelog.go): a running build's log is Postgres's chunks (a
// durable prefix, grown a whole TraceChunkSize at a time) followed by a live tail in Redis
// (LiveTraces) that a PATCH appends to with one atomic Lua call, no Postgres statement. The
// tail carries the build's state, written by the Service's transitions and re-checked
// against Postgres once per LiveTraceCheck. Losing the tail loses nothing: the runner keeps
// its whole trace and resends from the size the server names (416, and 412 on a final
// update); while Redis refuses writes, appends go to Postgres. A finish fences the tail
// before it commits, and LiveLog.Open closes it before reading, so the archive reads every
// byte that was acknowledged.
//
// Archived logs (package joblogs): whatever ends a build lists it for archiving in the
// finishing transaction (a trigger), and after the commit joblogs' ArchiveTraces (at once
// on the replica that took the final update, told by TraceArchiveRequests, and in
// reaper.TraceArchiver's pass on every replica) streams the log once out of SealLog into
// the ObjectStore, computing the coverage on the way, commits its "trace" Artifact, then
// drops the live log (DropLiveTail). Its reads (OpenTrace, TraceRange, TraceLines) take
// the archive when there is one, else the live log (LiveTraceRange, LiveTraceLines).
package builds
