// Package builds is jobapi's domain: build states and the rules that move a build between
// them, the auto-retry policy, pipeline definitions, and the Service that the HTTP handlers
// and background workers call. It imports only the standard library; Postgres and Redis
// live behind the Store and Leases interfaces it declares (see builds/pgstore and
// builds/redisstore).
//
// States (SPEC §3):
//
//	created ──stage released──▶ pending ──claim, one-phase───────────────────────────────▶ running ──final update──▶ success | failed
//	 │  ▲                         │  └──claim, two-phase──▶ waiting_for_runner_ack ──ack───┘ │  │
//	 │  │                         │                           │ decline, ack timeout         │  └──operator cancel──▶ canceling
//	 │  │ operator retry of       │ stuck_pending reaper      ▼                              │                          │ final update,
//	 │  │ an earlier stage        └─────────────────────────▶ failed ◀──reapers, trace limit─┘                          │ reaper
//	 ▼  │                                                     └──auto-retry──▶ new attempt, pending                     ▼
//	skipped  (an earlier stage failed or was canceled)                                                              canceled
//	created | pending | waiting_for_runner_ack ──operator cancel──▶ canceled
//	success | failed | canceled ──operator retry──▶ new attempt, pending
//	stuck stage: pessimistic fails what is unfinished (canceling ends canceled); optimistic releases the next stage
//
// Every transition, declared in BuildTransitions and PipelineTransitions (the README
// carries the same table; tests keep the copies equal):
//
//	build from                           | trigger                                       | to        | event               | failure_reason
//	-------------------------------------+-----------------------------------------------+-----------+---------------------+----------------------------
//	(new)                                | pipeline created, job in its first stage      | pending   | queued              | -
//	(new)                                | pipeline created, job in a later stage        | created   | created             | -
//	(new)                                | retry (auto or operator): the new attempt     | pending   | queued              | -
//	created                              | its stage released: earlier stages finished   | pending   | queued              | -
//	created                              | an earlier stage failed or was canceled       | skipped   | skipped             | -
//	created, pending, waiting            | operator cancels the job or pipeline          | canceled  | canceled            | -
//	pending                              | claimed by a runner, one-phase                | running   | assigned            | -
//	pending                              | claimed by a runner, two-phase                | waiting   | assigned            | -
//	pending                              | reaper: pending too long                      | failed    | dropped_stuck       | stuck_pending
//	pending, waiting, running            | stuck stage, pessimistic                      | failed    | stuck_stage         | stuck_or_timeout_failure
//	pending, waiting, running, canceling | stuck stage, optimistic (next stage released) | (same)    | stuck_stage         | -
//	waiting                              | runner acks (PUT state=running)               | running   | acknowledged        | -
//	waiting                              | runner keep-alive (PUT state=pending)         | (same)    | keepalive           | -
//	waiting                              | runner declines (PUT state=failed)            | failed    | declined            | (runner's)
//	waiting                              | ack sweeper: key expired or max wait passed   | failed    | ack_timeout         | runner_provisioning_timeout
//	waiting                              | ack sweeper: key alive, deadline moved        | (same)    | -                   | -
//	running                              | final update (PUT state=success)              | success   | finished            | -
//	running                              | final update (PUT state=failed)               | failed    | finished            | (runner's)
//	running, canceling                   | runner update or trace (liveness)             | (same)    | -                   | -
//	running, canceling                   | trace over the size limit                     | failed    | trace_size_exceeded | trace_size_exceeded
//	running                              | reaper: running without updates               | failed    | dropped_stuck       | no_updates_running
//	running                              | reaper: running past timeout + grace          | failed    | dropped_stuck       | job_execution_timeout
//	waiting, running                     | its runner deleted (operator or unregister)   | failed    | runner_deleted      | runner_system_failure
//	running                              | operator cancels the job or pipeline          | canceling | cancel_requested    | -
//	canceling                            | final update (PUT success or failed)          | canceled  | finished            | -
//	canceling                            | reaper: canceling without updates             | canceled  | dropped_stuck       | -
//	canceling                            | stuck stage, pessimistic                      | canceled  | stuck_stage         | -
//	canceling                            | its runner deleted                            | canceled  | runner_deleted      | -
//	failed                               | auto-retry allowed (new attempt queued)       | (same)    | retried             | -
//	failed                               | auto-retry limit reached                      | (same)    | retry_exhausted     | -
//	success, failed, canceled            | operator retry (new attempt queued)           | (same)    | retried             | -
//	skipped                              | operator retries an earlier stage's build     | created   | reopened            | -
//	waiting = waiting_for_runner_ack; (same): no state change; (runner's): the PUT's
//	failure_reason, else unknown_failure (final update) or runner_system_failure (decline).
//
//	pipeline from             | trigger                                     | to
//	--------------------------+---------------------------------------------+-----------------
//	(new)                     | pipeline created                            | pending
//	pending                   | a build assigned; or one ended, others left | running
//	running                   | its only started build retried, none ended  | pending
//	pending, running          | all latest attempts ended, all succeeded*   | success
//	pending, running          | all ended, one failed (no allow_failure)    | failed
//	pending, running          | all ended, one canceled, none failed*       | canceled
//	success, failed, canceled | operator retries one of its builds          | pending, running
//	* allow_failure failures count as succeeded. Pipelines record no events: a change
//	writes updated_at and progressed_at, and finished_at when it ends.
//
// The decisions are plain functions here (PipelineStatus, PlanAdvance, DecideAutoRetry,
// DecideExpiredAck, PlanStuckStage, ReapParams.Rules); the store carries out what they
// decide. Postgres holds the state of record and every transition is a compare-and-set
// (UPDATE … WHERE status = expected). Redis only holds the ack TTL: losing it can make a
// waiting build time out early, never run twice.
package builds
