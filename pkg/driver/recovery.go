package driver

import (
	"context"
	"errors"
	"os"
	"sync"
	"time"

	"k8s.io/klog/v2"
	mount "k8s.io/mount-utils"

	"github.com/csi-rclone/csi-rclone/pkg/mounter"
	"github.com/csi-rclone/csi-rclone/pkg/state"
	"github.com/csi-rclone/csi-rclone/pkg/worker"
)

// Backoff of a volume whose worker keeps dying or whose recovery keeps
// failing: none for the first death, then 1s, 2s, 4s ... up to maxBackoff.
// A worker that stayed up for stableAfter resets it.
const (
	firstBackoff = time.Second
	maxBackoff   = time.Minute
	stableAfter  = time.Minute
)

// reconcile runs once when the driver starts, before it reports ready: the
// kubelet does not stage again after a plugin restart, so the driver mounts
// every recorded volume again and repairs its targets. The first attempt for
// every volume is made (with bounded concurrency) before it returns; volumes
// whose attempt failed are retried in the background with backoff.
func (s *nodeServer) reconcile(ctx context.Context) {
	recs, errs := s.store.Load()
	for _, err := range errs {
		klog.ErrorS(err, "skipping a volume record that cannot be read")
		metricSkippedRecords.Inc()
	}
	var vols []*stagedVolume
	s.mu.Lock()
	for _, rec := range recs {
		if rec.Phase == state.Staging {
			// The driver died during NodeStageVolume; the kubelet retries it.
			klog.InfoS("cleaning up a stage that did not finish", "volumeID", rec.VolumeID, "stagingPath", rec.StagingPath)
			if err := s.m.Unmount(rec.StagingPath); err != nil {
				klog.ErrorS(err, "unmounting a half-staged volume", "volumeID", rec.VolumeID)
			}
			if err := s.store.Delete(rec.VolumeID); err != nil {
				klog.ErrorS(err, "removing a record", "volumeID", rec.VolumeID)
			}
			continue
		}
		v := s.newStagedVolume(rec)
		v.recovered = make(chan struct{})
		s.volumes[v.id] = v
		vols = append(vols, v)
	}
	s.mu.Unlock()

	sem := make(chan struct{}, s.d.opts.RecoveryConcurrency)
	var wg sync.WaitGroup
	for _, v := range vols {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			s.locks.tryAcquire(v.id) // nobody else can hold it yet: calls wait for recovered
			err := s.restore(ctx, v) // no worker of ours serves it: mount anew
			s.locks.release(v.id)
			close(v.recovered)
			if err != nil {
				go s.keepMounted(v, nil)
			}
		}()
	}
	wg.Wait()
}

// restore mounts v again from its record, decrypting its secret again, and
// repairs its targets. The caller holds the volume's lock.
func (s *nodeServer) restore(ctx context.Context, v *stagedVolume) error {
	start := time.Now()
	s.mu.Lock()
	old := v.proc
	s.mu.Unlock()
	if old != nil {
		old.Kill() // dead already, or alive with a dead mount
	}
	ctx, cancel := context.WithTimeout(ctx, 2*s.d.opts.MountTimeout)
	defer cancel()
	if err := s.start(ctx, v); err != nil {
		s.mu.Lock()
		v.health = "mounting again failed: " + err.Error()
		v.failures++
		s.mu.Unlock()
		metricRecoveries.WithLabelValues("failure").Inc()
		klog.ErrorS(err, "mounting volume again failed", "volumeID", v.id)
		return err
	}
	s.mu.Lock()
	v.started = time.Now()
	proc := v.proc
	s.mu.Unlock()
	repaired := s.repairTargets(v)
	go s.keepMounted(v, proc)
	took := time.Since(start)
	metricRecoveries.WithLabelValues("success").Inc()
	metricRecoverySeconds.Observe(took.Seconds())
	klog.InfoS("volume mounted again", "volumeID", v.id, "stagingPath", v.stagingPath, "targetsRepaired", repaired, "duration", took, "workerPID", proc.Pid())
	return nil
}

// repairTargets binds the staging mount again onto every recorded target
// whose bind is dead: stacked on top, so that containers that hold a
// HostToContainer copy of the target see it. Targets that the kubelet has
// removed, or unmounted, leave the record. Then it repairs the kubelet's
// subPath binds of each target that is still published.
func (s *nodeServer) repairTargets(v *stagedVolume) int {
	s.mu.Lock()
	targets := make(map[string]bool, len(v.rec.Targets))
	for t, ro := range v.rec.Targets {
		targets[t] = ro
	}
	s.mu.Unlock()
	repaired := 0
	for target, ro := range targets {
		published, fixed := s.repairTarget(v, target, ro)
		if fixed {
			repaired++
		}
		if published {
			s.repairSubpaths(v, target)
		}
	}
	return repaired
}

// repairTarget repairs one target; published says whether it stays in the
// record, fixed whether a new bind was stacked on it.
func (s *nodeServer) repairTarget(v *stagedVolume, target string, ro bool) (published, fixed bool) {
	_, err := os.Lstat(target)
	if errors.Is(err, os.ErrNotExist) {
		klog.InfoS("target is gone; forgetting it", "volumeID", v.id, "targetPath", target)
		_ = s.setTarget(v, target, ro, false)
		return false, false
	}
	if err != nil && !mount.IsCorruptedMnt(err) {
		klog.ErrorS(err, "checking target", "volumeID", v.id, "targetPath", target)
		return true, false
	}
	switch st, _ := s.m.Check(target); st {
	case mounter.Mounted:
		return true, false
	case mounter.NotMounted:
		klog.InfoS("target is not mounted any more; forgetting it", "volumeID", v.id, "targetPath", target)
		_ = s.setTarget(v, target, ro, false)
		return false, false
	}
	if err := s.m.Bind(v.stagingPath, target, ro); err != nil {
		klog.ErrorS(err, "repairing target", "volumeID", v.id, "targetPath", target)
		return true, false
	}
	return true, true
}

// repairSubpaths stacks a fresh bind on every dead subPath bind of target:
// the kubelet bound TARGET/<subPath> elsewhere for a container, which a
// bind on the target does not reach. The new bind is of the same
// subdirectory of the staging mount, with the same read-only flag. It runs
// whether or not the target needed repair: a subPath bind may still be dead
// after a repair that failed half-way.
//
// The kubelet's bind shares the target's propagation group, so the new bind
// also appears on the target's dead bottom layer at <target>/<subPath>,
// under the layer repairTargets stacked: out of sight, and unmounted with
// the subPath bind or the target.
func (s *nodeServer) repairSubpaths(v *stagedVolume, target string) {
	binds, err := s.m.SubpathBinds(target)
	if err != nil {
		klog.ErrorS(err, "looking for subPath binds", "volumeID", v.id, "targetPath", target)
		return
	}
	for _, b := range binds {
		if st, _ := s.m.Check(b.Path); st != mounter.Dead {
			continue
		}
		if b.Within != "" {
			klog.ErrorS(nil, "not repairing a subPath bind inside another subPath bind of the pod: the kubelet could not unmount the other one afterwards",
				"volumeID", v.id, "subPathMount", b.Path, "within", b.Within)
			continue
		}
		if err := s.m.BindSubdir(v.stagingPath, b.Root, b.Path, b.ReadOnly); err != nil {
			klog.ErrorS(err, "repairing subPath bind", "volumeID", v.id, "targetPath", target, "subPathMount", b.Path)
			continue
		}
		klog.InfoS("subPath bind repaired", "volumeID", v.id, "subPathMount", b.Path, "readOnly", b.ReadOnly)
	}
}

// keepMounted waits until proc exits (proc nil: no worker runs) and mounts
// v again, with backoff while that keeps failing, until v is unstaged.
func (s *nodeServer) keepMounted(v *stagedVolume, proc *worker.Process) {
	if proc != nil {
		<-proc.Done()
	}
	for first := true; ; first = false {
		s.mu.Lock()
		current := s.volumes[v.id] == v && v.proc == proc && !v.stopping
		if current && first && proc != nil {
			if time.Since(v.started) > stableAfter {
				v.failures = 0
			} else {
				v.failures++
			}
			v.health = "the mount worker exited"
		}
		wait := backoff(v.failures)
		s.mu.Unlock()
		if !current {
			return
		}
		if first && proc != nil {
			metricWorkerRestarts.Inc()
			klog.ErrorS(nil, "mount worker died; mounting the volume again", "volumeID", v.id, "workerPID", proc.Pid(), "in", wait)
		}
		time.Sleep(wait)
		if !s.locks.tryAcquire(v.id) {
			time.Sleep(100 * time.Millisecond) // a CSI call has it; look again
			continue
		}
		s.mu.Lock()
		current = s.volumes[v.id] == v && v.proc == proc && !v.stopping
		s.mu.Unlock()
		var err error
		if current {
			err = s.restore(context.Background(), v)
		}
		s.locks.release(v.id)
		if !current || err == nil {
			return
		}
	}
}

// backoff is the wait before the next attempt after failures deaths or
// failed mounts in a row: none after the first, so that a volume whose
// worker died once is back at once.
func backoff(failures int) time.Duration {
	if failures <= 1 {
		return 0
	}
	d := firstBackoff << min(failures-2, 10)
	return min(d, maxBackoff)
}
