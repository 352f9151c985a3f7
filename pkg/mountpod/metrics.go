package mountpod

import "github.com/prometheus/client_golang/prometheus"

var (
	metricPodsCreated = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "csi_rclone_mount_pods_created_total", Help: "Mount pods this node plugin created.",
	})
	metricPods = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "csi_rclone_mount_pods", Help: "Mount pods serving this node's volumes, by the driver version that made each (mount pods keep their version until their volume is unstaged).",
	}, []string{"version"})
	metricPodsAdopted = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "csi_rclone_mount_pods_adopted_total", Help: "Mount pods whose worker this node plugin attached to after a restart.",
	})
)

// Collectors are the package's metrics, for the driver's registry.
func Collectors() []prometheus.Collector {
	return []prometheus.Collector{metricPods, metricPodsCreated, metricPodsAdopted}
}
