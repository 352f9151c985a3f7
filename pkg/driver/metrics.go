package driver

import (
	"github.com/prometheus/client_golang/prometheus"
)

// The driver's metrics, served on --metrics-address.
var (
	metrics = prometheus.NewRegistry()

	metricWorkerRestarts = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "csi_rclone_worker_restarts_total",
		Help: "Mount workers that died while their volume was staged, and were started again.",
	})
	metricRecoveries = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "csi_rclone_volume_recoveries_total",
		Help: "Attempts to mount a staged volume again (after a driver restart or a worker death), by result.",
	}, []string{"result"})
	metricRecoverySeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "csi_rclone_volume_recovery_seconds",
		Help:    "Time to mount a volume again and repair its targets.",
		Buckets: prometheus.ExponentialBuckets(0.05, 2, 12),
	})
	metricSubpathUnrepairable = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "csi_rclone_subpath_unrepairable_total",
		Help: "Failed attempts to repair a subPath bind (or its copy in every container that mounts it); recovery tries again for about a minute, then such a pod must be restarted.",
	})
	metricSkippedRecords = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "csi_rclone_skipped_records_total",
		Help: "Volume records that could not be read at start (corrupt or of another format version).",
	})
)

func init() {
	metrics.MustRegister(metricWorkerRestarts, metricRecoveries, metricRecoverySeconds, metricSkippedRecords, metricSubpathUnrepairable,
		prometheus.NewGoCollector(), prometheus.NewProcessCollector(prometheus.ProcessCollectorOpts{}))
}
