package server

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/builds/joblogs"
	"github.com/jobapi/jobapi/builds/schedules"
	"github.com/jobapi/jobapi/featureflags"
	"github.com/jobapi/jobapi/reaper"
	"github.com/jobapi/jobapi/retry"
)

// metrics are the domain metrics of one replica (HTTP metrics live in handlers).
type metrics struct {
	ackLatency    prometheus.Histogram
	sweeps        *prometheus.CounterVec
	sweepDuration prometheus.Histogram
	ackTimeouts   prometheus.Counter
	retries       *prometheus.CounterVec
	reaped        *prometheus.CounterVec
	stuckStages   *prometheus.CounterVec
	workerErrors  *prometheus.CounterVec
	redisErrors   *prometheus.CounterVec
	// Artifacts pass.
	artifactsExpired      prometheus.Counter
	artifactsExpiredBytes prometheus.Counter
	objectsRemoved        prometheus.Counter
	artifactsStored       prometheus.Gauge
	artifactsStoredBytes  prometheus.Gauge
	// Trace archives.
	traceArchiveCount  *prometheus.CounterVec
	traceArchivedBytes prometheus.Counter
	// Pipeline schedules.
	scheduleTicks *prometheus.CounterVec
}

func newMetrics(reg *prometheus.Registry) *metrics {
	m := &metrics{
		ackLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "jobapi_assign_to_ack_seconds", Help: "Time from two-phase assignment to the runner's ack.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 16),
		}),
		sweeps: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "jobapi_ack_sweeps_total", Help: "Ack sweeper runs by result.",
		}, []string{"result"}),
		sweepDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "jobapi_ack_sweep_duration_seconds", Help: "Duration of one ack sweep.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14),
		}),
		ackTimeouts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "jobapi_ack_timeouts_total", Help: "Builds failed with runner_provisioning_timeout.",
		}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "jobapi_auto_retries_total", Help: "Automatic retries after ack timeouts, by outcome.",
		}, []string{"reason", "outcome"}),
	}
	m.reaped = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "jobapi_reaped_builds_total", Help: "Builds failed or canceled by the reapers, by reason.",
	}, []string{"reason"})
	m.stuckStages = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "jobapi_stuck_stages_total", Help: "Pipelines found with a stuck stage, by timeout strategy.",
	}, []string{"strategy"})
	m.workerErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "jobapi_worker_errors_total", Help: "Failed runs of background workers.",
	}, []string{"worker"})
	m.redisErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "jobapi_redis_errors_total",
		Help: "Failed Redis commands and pipelines (after the client's retries) by kind: loading, clusterdown, failover, refused, reset, timeout, canceled, closed, other.",
	}, []string{"kind"})
	m.artifactsExpired = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "jobapi_artifacts_expired_total", Help: "Artifacts deleted by the artifacts pass past their expire_in.",
	})
	m.artifactsExpiredBytes = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "jobapi_artifacts_expired_bytes_total", Help: "Bytes of the artifacts deleted past their expire_in.",
	})
	m.objectsRemoved = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "jobapi_artifact_objects_removed_total",
		Help: "Objects the artifacts pass removed from the object store: of deleted or expired artifacts, and of uploads that never committed.",
	})
	m.artifactsStored = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "jobapi_artifacts_stored", Help: "Job artifacts in the object store, counted by the last artifacts pass.",
	})
	m.artifactsStoredBytes = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "jobapi_artifacts_stored_bytes", Help: "Bytes of the job artifacts in the object store, counted by the last artifacts pass.",
	})
	m.traceArchiveCount = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "jobapi_trace_archives_total",
		Help: "Finished builds' logs archived into the object store (archived), found empty (empty), or whose archive failed and will be retried (failed).",
	}, []string{"result"})
	m.traceArchivedBytes = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "jobapi_trace_archived_bytes_total", Help: "Bytes of job logs archived into the object store.",
	})
	m.scheduleTicks = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "jobapi_pipeline_schedule_ticks_total",
		Help: "Schedule ticks this replica claimed, by outcome: started (a pipeline), failed (none could be created; the schedule runs at its next time).",
	}, []string{"outcome"})
	reg.MustRegister(m.ackLatency, m.sweeps, m.sweepDuration, m.ackTimeouts, m.retries, m.reaped, m.stuckStages, m.workerErrors, m.redisErrors,
		m.artifactsExpired, m.artifactsExpiredBytes, m.objectsRemoved, m.artifactsStored, m.artifactsStoredBytes,
		m.traceArchiveCount, m.traceArchivedBytes, m.scheduleTicks)
	return m
}

// redisError counts one failed Redis call (redisstore.ErrorHook).
func (m *metrics) redisError(kind string) { m.redisErrors.WithLabelValues(kind).Inc() }

// Acknowledged implements builds.Observer.
func (m *metrics) Acknowledged(d time.Duration) { m.ackLatency.Observe(d.Seconds()) }

func (m *metrics) sweep(r retry.Report, err error) {
	if err != nil {
		m.sweeps.WithLabelValues("error").Inc()
		return
	}
	m.sweeps.WithLabelValues("ok").Inc()
	m.sweepDuration.Observe(r.Duration.Seconds())
	m.ackTimeouts.Add(float64(r.TimedOut))
	m.retries.WithLabelValues("runner_provisioning_timeout", "retried").Add(float64(r.Retried))
	m.retries.WithLabelValues("runner_provisioning_timeout", "exhausted").Add(float64(r.Exhausted))
}

// registerFlags exposes the flag getter's own counters as metrics, read at scrape time.
func (m *metrics) registerFlags(reg *prometheus.Registry, flags *featureflags.Flags) {
	for _, key := range featureflags.Keys {
		for _, result := range []string{"on", "off"} {
			reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
				Name: "jobapi_flag_evaluations_total", Help: "Feature flag evaluations by result.",
				ConstLabels: prometheus.Labels{"flag": key, "result": result},
			}, func() float64 {
				c := flags.Counts(key)
				if result == "on" {
					return float64(c.On)
				}
				return float64(c.Off)
			}))
		}
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "jobapi_flag_fallbacks_total", Help: "Evaluations answered with the default because the flag backend failed.",
			ConstLabels: prometheus.Labels{"flag": key},
		}, func() float64 { return float64(flags.Counts(key).Fallbacks) }))
	}
}

func (m *metrics) reap(r builds.ReapResult, err error) {
	if err != nil {
		m.workerErrors.WithLabelValues("reaper").Inc()
	}
	m.reaped.WithLabelValues(builds.ReasonNoUpdatesRunning).Add(float64(r.NoUpdates))
	m.reaped.WithLabelValues(builds.ReasonJobExecutionTimeout).Add(float64(r.ExecutionTimeout))
	m.reaped.WithLabelValues(builds.ReasonStuckPending).Add(float64(r.StuckPending))
	m.reaped.WithLabelValues("canceled").Add(float64(r.Canceled))
}

func (m *metrics) stuck(r builds.StuckResult, err error) {
	if err != nil {
		m.workerErrors.WithLabelValues("stuck_stages").Inc()
	}
	for _, p := range r.Stuck {
		m.stuckStages.WithLabelValues(p.Strategy).Inc()
	}
}

func (m *metrics) traceArchives(r joblogs.ArchivePass, err error) {
	if err != nil {
		m.workerErrors.WithLabelValues("trace_archive").Inc()
	}
	m.traceArchiveCount.WithLabelValues("archived").Add(float64(r.Archived))
	m.traceArchiveCount.WithLabelValues("empty").Add(float64(r.Empty))
	m.traceArchiveCount.WithLabelValues("failed").Add(float64(r.Failed))
	m.traceArchivedBytes.Add(float64(r.Bytes))
}

func (m *metrics) scheduleTick(r schedules.TickResult, err error) {
	if err != nil {
		m.workerErrors.WithLabelValues("pipeline_schedules").Inc()
	}
	m.scheduleTicks.WithLabelValues("started").Add(float64(r.Started))
	m.scheduleTicks.WithLabelValues("failed").Add(float64(r.Failed))
}

func (m *metrics) artifactsPass(r reaper.ArtifactsPass, err error) {
	if err != nil {
		m.workerErrors.WithLabelValues("artifacts").Inc()
	}
	m.artifactsExpired.Add(float64(r.Expired))
	m.artifactsExpiredBytes.Add(float64(r.ExpiredBytes))
	m.objectsRemoved.Add(float64(r.Removed))
	if r.TotalsRead {
		m.artifactsStored.Set(float64(r.Stored))
		m.artifactsStoredBytes.Set(float64(r.StoredBytes))
	}
}
