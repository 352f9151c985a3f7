package driver

import (
	"context"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/csi-rclone/csi-rclone/pkg/mounter"
	"github.com/csi-rclone/csi-rclone/pkg/worker"
)

// MountWorker is a volume's running worker, as a Mounter returns it.
type MountWorker = mountWorker

// Mounter runs mount workers elsewhere than as children of the driver: in
// mount pods (pkg/mountpod), which outlive the driver. The recovery logic
// (records, repair of targets, drain, exit reports) is the same for both.
type Mounter interface {
	// Start mounts the FUSE device at spec.MountPoint and starts a worker
	// that serves it, as worker.Start does.
	Start(ctx context.Context, opts worker.Options, spec worker.Spec) (MountWorker, error)
	// Recover runs once as the driver starts, with the recorded volumes: it
	// attaches to the live worker of each that has one, and removes the
	// workers that no recorded volume needs.
	Recover(ctx context.Context, volumeIDs []string) map[string]MountWorker
}

// podResources are the volume context's keys for its mount pod's
// resources (mountPodMemoryLimit, ...): an operator's (StorageClass) or an
// administrator's (static PV) word, never the tenant's stage secret.
func podResources(volumeContext map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range volumeContext {
		if strings.HasPrefix(k, "mountPod") {
			out[k] = v
		}
	}
	return out
}

// RegisterMetrics adds collectors (a Mounter's) to the driver's metrics.
func RegisterMetrics(cs ...prometheus.Collector) { metrics.MustRegister(cs...) }

// adoptAll attaches to the workers that outlived the previous driver.
func (s *nodeServer) adoptAll(ctx context.Context, vols []*stagedVolume) map[string]mountWorker {
	if s.d.opts.Mounter == nil {
		return nil // children died with the previous driver
	}
	ids := make([]string, 0, len(vols))
	for _, v := range vols {
		ids = append(ids, v.id)
	}
	start := time.Now()
	adopted := s.d.opts.Mounter.Recover(ctx, ids)
	klog.InfoS("attached to the mount pods that outlived the previous driver", "volumes", len(vols), "adopted", len(adopted), "duration", time.Since(start))
	return adopted
}

// adoptOrRestore takes over w, the live worker of v that outlived the
// previous driver, when v's staging mount is alive: nothing is mounted
// again, and the targets are checked as after any recovery. Without a
// live worker, or with a dead mount, v is mounted again as a child's
// volume would be (restore ends w first).
func (s *nodeServer) adoptOrRestore(ctx context.Context, v *stagedVolume, w mountWorker) error {
	if w == nil {
		s.tellPods(v, corev1.EventTypeWarning, ReasonRecovering, "the node plugin restarted; mounting the volume again")
		return s.restore(ctx, v) // no worker of ours serves it: mount anew
	}
	if st, err := s.m.Check(v.stagingPath); st != mounter.Mounted {
		klog.InfoS("the volume's mount pod lives but its mount does not; mounting again", "volumeID", v.id, "stagingPath", v.stagingPath, "state", st, "err", err)
		s.tellPods(v, corev1.EventTypeWarning, ReasonRecovering, "the node plugin restarted and the volume's mount is dead; mounting it again")
		s.mu.Lock()
		v.proc = w
		s.mu.Unlock()
		return s.restore(ctx, v)
	}
	s.mu.Lock()
	v.proc, v.health, v.started = w, "", time.Now()
	s.mu.Unlock()
	repaired, incomplete := s.repairTargets(v)
	s.watch(v, w)
	if incomplete {
		s.d.tasks.Go("repair again", func(ctx context.Context) { s.repairAgain(ctx, v, w) })
	}
	klog.InfoS("volume adopted: its mount pod serves it; nothing mounted again", "volumeID", v.id, "stagingPath", v.stagingPath, "targetsRepaired", repaired)
	return nil
}

// detach lets go of v's worker as the driver shuts down.
func (s *nodeServer) detach(v *stagedVolume) {
	s.mu.Lock()
	v.stopping = true
	proc := v.proc
	s.mu.Unlock()
	if proc != nil {
		proc.Detach()
	}
}
