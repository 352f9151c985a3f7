package driver

import (
	"context"
	"errors"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	mount "k8s.io/mount-utils"

	"github.com/csi-rclone/csi-rclone/pkg/mounter"
	"github.com/csi-rclone/csi-rclone/pkg/state"
)

// Backoff of a volume whose worker keeps dying or whose recovery keeps
// failing: none for the first death, then 1s, 2s, 4s ... up to maxBackoff.
// A worker that stayed up for stableAfter resets it.
const (
	firstBackoff = time.Second
	maxBackoff   = time.Minute
	stableAfter  = time.Minute
)

// load runs once when the driver starts, before it serves: the kubelet does
// not stage again after a plugin restart, so every recorded volume must be
// mounted again, and a call for one must find it. load registers each as
// recovering (its lock held, its recovered channel open) for recoverAll, and
// cleans up stages that did not finish.
func (s *nodeServer) load() []*stagedVolume {
	recs, errs := s.store.Load()
	for _, err := range errs {
		klog.ErrorS(err, "skipping a volume record that cannot be read")
		metricSkippedRecords.Inc()
	}
	var vols []*stagedVolume
	s.mu.Lock()
	defer s.mu.Unlock()
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
		s.locks.tryAcquire(v.id) // nobody else can hold it yet: calls wait for recovered
		s.volumes[v.id] = v
		vols = append(vols, v)
	}
	s.assignUIDs(vols)
	return vols
}

// recoverAll makes the first attempt to mount every loaded volume again,
// with bounded concurrency, and returns when all are made; volumes whose
// attempt failed are retried in the background with backoff.
func (s *nodeServer) recoverAll(ctx context.Context, vols []*stagedVolume) {
	adopted := s.adoptAll(ctx, vols)
	sem := make(chan struct{}, s.d.opts.RecoveryConcurrency)
	var wg sync.WaitGroup
	for _, v := range vols {
		wg.Add(1)
		started := s.d.tasks.Go("recover", func(ctx context.Context) {
			defer wg.Done()
			err := errors.New("recovery did not finish")
			defer func() { s.endRecovery(v, err) }() // even after a panic
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				return
			}
			defer func() { <-sem }()
			err = s.adoptOrRestore(ctx, v, adopted[v.id])
		})
		if !started {
			wg.Done()
			s.endRecovery(v, errShutdown)
		}
	}
	wg.Wait()
}

// abandon ends the recovery of volumes that will not be recovered: the
// driver is shutting down.
func (s *nodeServer) abandon(vols []*stagedVolume) {
	for _, v := range vols {
		s.endRecovery(v, errShutdown)
	}
}

// endRecovery lets the calls waiting for v go on, and keeps retrying a
// volume whose first attempt failed (unless the driver is shutting down).
func (s *nodeServer) endRecovery(v *stagedVolume, err error) {
	s.locks.release(v.id)
	close(v.recovered)
	if err != nil {
		s.watch(v, nil)
	}
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
		s.tellPods(v, corev1.EventTypeWarning, ReasonRecovering, "%s; trying again", userMessage("mounting again failed", err))
		return err
	}
	s.mu.Lock()
	v.started = time.Now()
	v.recoveries++
	proc := v.proc
	s.mu.Unlock()
	repaired, incomplete := s.repairTargets(v)
	s.watch(v, proc)
	if incomplete {
		s.d.tasks.Go("repair again", func(ctx context.Context) { s.repairAgain(ctx, v, proc) })
	}
	took := time.Since(start)
	metricRecoveries.WithLabelValues("success").Inc()
	metricRecoverySeconds.Observe(took.Seconds())
	klog.InfoS("volume mounted again", "volumeID", v.id, "stagingPath", v.stagingPath, "targetsRepaired", repaired, "duration", took, "workerPID", proc.Pid())
	s.tellPods(v, corev1.EventTypeNormal, ReasonRecovered, "mounted again in %s, %d target(s) repaired", took.Round(time.Millisecond), repaired)
	return nil
}

// repairTargets binds the staging mount again onto every recorded target
// whose bind is dead: stacked on top, so that containers that hold a
// HostToContainer copy of the target see it. Targets that the kubelet has
// removed, or unmounted, leave the record. Then it repairs the kubelet's
// subPath binds of each target that is still published.
// incomplete says that a subPath bind could not be repaired (yet).
func (s *nodeServer) repairTargets(v *stagedVolume) (repaired int, incomplete bool) {
	s.mu.Lock()
	targets := make(map[string]bool, len(v.rec.Targets))
	for t, ro := range v.rec.Targets {
		targets[t] = ro
	}
	s.mu.Unlock()
	for target, ro := range targets {
		published, fixed := s.repairTarget(v, target, ro)
		if fixed {
			repaired++
		}
		if published && !s.repairSubpaths(v, target) {
			incomplete = true
		}
	}
	if !s.replaceStaleCopies(v) {
		incomplete = true
	}
	return repaired, incomplete
}

// replaceStaleCopies tries again the copies in pods of replaced subPath
// binds that their replacement did not reach, and forgets those done or
// whose bind is gone. ok says none is left.
func (s *nodeServer) replaceStaleCopies(v *stagedVolume) (ok bool) {
	var left []mounter.StaleCopies
	for _, c := range v.staleCopies {
		n, err := s.m.ReplaceCopies(context.Background(), c)
		switch {
		case errors.Is(err, os.ErrNotExist):
			klog.InfoS("subPath bind is gone; forgetting its copies", "volumeID", v.id, "subPathMount", c.Path)
		case err != nil:
			klog.ErrorS(err, "replacing copies of a subPath bind; the containers not reached must be restarted",
				"volumeID", v.id, "subPathMount", c.Path, "subPath", c.Root, "containerMountsReplaced", n)
			left = append(left, c)
		default:
			klog.InfoS("subPath copies replaced", "volumeID", v.id, "subPathMount", c.Path, "containerMountsReplaced", n)
		}
	}
	v.staleCopies = left
	return len(left) == 0
}

// repairAgain retries, with backoff, the repairs of v's subPath binds that
// failed after v was mounted again by proc (a pod's namespace that could
// not be entered at that moment, a helper that timed out), for as long as
// proc is v's worker.
func (s *nodeServer) repairAgain(ctx context.Context, v *stagedVolume, proc mountWorker) {
	for wait := 2 * time.Second; wait <= 32*time.Second; wait *= 2 {
		if !sleep(ctx, wait) {
			return
		}
		for !s.locks.tryAcquire(v.id) {
			if !sleep(ctx, 100*time.Millisecond) {
				return
			}
		}
		s.mu.Lock()
		current := s.volumes[v.id] == v && v.proc == proc && !v.stopping
		s.mu.Unlock()
		incomplete := false
		if current {
			_, incomplete = s.repairTargets(v)
		}
		s.locks.release(v.id)
		if !current || !incomplete {
			return
		}
	}
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
func (s *nodeServer) repairSubpaths(v *stagedVolume, target string) (ok bool) {
	binds, err := s.m.SubpathBinds(target)
	if err != nil {
		klog.ErrorS(err, "looking for subPath binds", "volumeID", v.id, "targetPath", target)
		return false
	}
	ok = true
	// Outer binds first: a path to an inner one's copy goes through the
	// outer one's.
	slices.SortStableFunc(binds, func(a, b mounter.SubpathBind) int {
		return strings.Count(a.Root, "/") - strings.Count(b.Root, "/")
	})
	for _, b := range binds {
		if st, _ := s.m.Check(b.Path); st != mounter.Dead {
			continue
		}
		if b.Unlinked || b.Within != "" {
			// Stacking cannot repair these: mount(2) refuses a dropped
			// dentry, and a bind stacked inside another subPath bind would
			// keep the kubelet from unmounting that one. Replace the bind,
			// and its copy in each container that mounts it.
			// Bounded: each container's copy is replaced by a helper
			// process killed after mounter.ReplaceTimeout.
			n, err := s.m.ReplaceSubpathBind(context.Background(), b, v.stagingPath)
			if left := (*mounter.CopiesLeftError)(nil); errors.As(err, &left) {
				v.staleCopies = append(v.staleCopies, left.Copies)
			}
			if err != nil {
				klog.ErrorS(err, "replacing a subPath bind; the containers not reached must be restarted",
					"volumeID", v.id, "subPathMount", b.Path, "subPath", b.Root, "containerMountsReplaced", n)
				metricSubpathUnrepairable.Inc()
				ok = false
				continue
			}
			klog.InfoS("subPath bind replaced", "volumeID", v.id, "subPathMount", b.Path, "readOnly", b.ReadOnly,
				"unlinked", b.Unlinked, "within", b.Within, "containerMountsReplaced", n)
			continue
		}
		if err := s.m.BindSubdir(v.stagingPath, b.Root, b.Path, b.ReadOnly); err != nil {
			klog.ErrorS(err, "repairing subPath bind", "volumeID", v.id, "targetPath", target, "subPathMount", b.Path)
			ok = false
			continue
		}
		klog.InfoS("subPath bind repaired", "volumeID", v.id, "subPathMount", b.Path, "readOnly", b.ReadOnly)
	}
	return ok
}

// watch supervises v's worker proc (nil: none runs) in the background,
// until v is unstaged or the driver shuts down.
func (s *nodeServer) watch(v *stagedVolume, proc mountWorker) {
	s.d.tasks.Go("supervise", func(ctx context.Context) { s.keepMounted(ctx, v, proc) })
}

// keepMounted waits until proc exits (proc nil: no worker runs) and mounts
// v again, with backoff while that keeps failing, until v is unstaged or
// ctx (the driver's) ends.
func (s *nodeServer) keepMounted(ctx context.Context, v *stagedVolume, proc mountWorker) {
	if proc != nil {
		select {
		case <-proc.Done():
		case <-ctx.Done():
			return
		}
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
			v.restarts++
		}
		wait := backoff(v.failures)
		s.mu.Unlock()
		if !current {
			return
		}
		if first && proc != nil {
			metricWorkerRestarts.Inc()
			klog.ErrorS(nil, "mount worker died; mounting the volume again", "volumeID", v.id, "workerPID", proc.Pid(), "in", wait)
			s.tellPods(v, corev1.EventTypeWarning, ReasonRecovering, "the mount worker died; mounting the volume again")
		}
		if !sleep(ctx, wait) {
			return
		}
		if !s.locks.tryAcquire(v.id) {
			if !sleep(ctx, 100*time.Millisecond) { // a CSI call has it; look again
				return
			}
			continue
		}
		if s.restoreIfCurrent(ctx, v, proc) {
			return
		}
	}
}

// restoreIfCurrent mounts v again if proc is still its worker and no unstage
// is stopping it. It reports whether supervising proc is over: v is mounted
// again (and a new supervisor watches it), is not ours to mount any more, or
// the driver is shutting down. The caller holds v's lock; it is released.
func (s *nodeServer) restoreIfCurrent(ctx context.Context, v *stagedVolume, proc mountWorker) bool {
	defer s.locks.release(v.id)
	s.mu.Lock()
	current := s.volumes[v.id] == v && v.proc == proc && !v.stopping
	s.mu.Unlock()
	if !current {
		return true
	}
	return s.restore(ctx, v) == nil || ctx.Err() != nil
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
