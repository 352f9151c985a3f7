package cluster

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Down tears down whatever a cluster in workDir left on the host: it finds
// its processes, mounts and cgroups on the machine, so it works after a
// crash as well as after Up. It is idempotent.
func Down(workDir string, logf func(string, ...any)) error {
	if logf == nil {
		logf = func(string, ...any) {}
	}
	workDir = filepath.Clean(workDir)
	var st hostState
	if data, err := os.ReadFile(filepath.Join(workDir, hostStateFile)); err == nil {
		if err := json.Unmarshal(data, &st); err != nil {
			return fmt.Errorf("host state: %w", err)
		}
	}
	var errs []error
	// The kubelet first, gracefully, so that it restarts nothing.
	if pids := ownProcesses(workDir, map[string]bool{"kubelet": true}); len(pids) > 0 {
		signalAll(pids, syscall.SIGTERM)
		waitGone(pids, 10*time.Second)
	}
	for i := 0; i < 20; i++ {
		pids := ownProcesses(workDir, nil)
		if len(pids) == 0 {
			break
		}
		logf("killing %d processes", len(pids))
		signalAll(pids, syscall.SIGKILL)
		waitGone(pids, 5*time.Second)
		if i == 19 {
			errs = append(errs, fmt.Errorf("processes left: %v", pids))
		}
	}
	if err := unmountUnder(workDir, st.Netns); err != nil {
		errs = append(errs, err)
	}
	if err := removeCgroups(); err != nil {
		errs = append(errs, err)
	}
	for name, v := range st.Sysctls {
		if cur, err := os.ReadFile(sysctlPath(name)); err == nil && strings.TrimSpace(string(cur)) != v {
			if err := os.WriteFile(sysctlPath(name), []byte(v), 0o644); err != nil {
				errs = append(errs, fmt.Errorf("restoring %s: %w", name, err))
			}
		}
	}
	// The veth pair goes with the namespace; this is for a namespace some
	// process outside kept alive.
	if _, err := os.Stat("/sys/class/net/" + hostVeth); err == nil {
		if err := run(exec.Command("ip", "link", "del", hostVeth)); err != nil {
			errs = append(errs, err)
		}
	}
	for _, p := range st.Absent {
		if _, err := os.Lstat(p); err != nil {
			continue
		}
		remove := os.RemoveAll
		if strings.HasSuffix(p, "/netns") {
			// Shared with anyone who adds a netns: only if empty.
			remove = os.Remove
		}
		if err := remove(p); err != nil {
			errs = append(errs, err)
		}
	}
	if mounts, err := mountsUnder(workDir); err != nil || len(mounts) > 0 {
		// Never remove files through a mount that is still there.
		return errors.Join(append(errs, fmt.Errorf("mounts left under %s: %v %v", workDir, mounts, err))...)
	}
	if err := os.RemoveAll(workDir); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// The components, by executable name; a process is ours when it is one of
// them and its command line names the work dir, or when it is in the
// cluster's cgroups (the containers).
var componentNames = map[string]bool{
	"etcd": true, "containerd": true, "containerd-shim-runc-v2": true, "containerd-shim": true,
	"kube-apiserver": true, "kube-controller-manager": true, "kube-scheduler": true, "kubelet": true,
	"nsenter": true, "runc": true,
}

func ownProcesses(workDir string, only map[string]bool) []int {
	self := os.Getpid()
	set := map[int]bool{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || len(cmdline) == 0 {
			continue
		}
		args := strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")
		name := filepath.Base(args[0])
		names := componentNames
		if only != nil {
			names = only
		}
		if names[name] && strings.Contains(string(cmdline), workDir) {
			set[pid] = true
		}
	}
	if only == nil {
		for _, pid := range cgroupProcs() {
			if pid != self {
				set[pid] = true
			}
		}
	}
	var pids []int
	for pid := range set {
		pids = append(pids, pid)
	}
	sort.Ints(pids)
	return pids
}

func signalAll(pids []int, sig syscall.Signal) {
	for _, pid := range pids {
		_ = syscall.Kill(pid, sig)
	}
}

func waitGone(pids []int, d time.Duration) {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		alive := false
		for _, pid := range pids {
			if alive = isAlive(pid); alive {
				break
			}
		}
		if !alive {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// isAlive is false for a process that is gone or a zombie.
func isAlive(pid int) bool {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(data)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] != 'Z'
	}
	return true
}

// cgroupRoots are the cluster's cgroups, one per mounted hierarchy.
func cgroupRoots() []string {
	var roots []string
	entries, _ := os.ReadDir("/sys/fs/cgroup")
	for _, e := range entries {
		dir := filepath.Join("/sys/fs/cgroup", e.Name(), CgroupDir)
		if _, err := os.Stat(dir); err == nil {
			roots = append(roots, dir)
		}
	}
	return roots
}

func cgroupProcs() []int {
	var pids []int
	for _, root := range cgroupRoots() {
		_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
				return nil
			}
			data, _ := os.ReadFile(p)
			for _, f := range strings.Fields(string(data)) {
				if pid, err := strconv.Atoi(f); err == nil {
					pids = append(pids, pid)
				}
			}
			return nil
		})
	}
	return pids
}

// setupCgroups makes the kubelet's cgroup root in every hierarchy (it
// refuses one that does not exist); cpuset needs its parent's cpus and mems.
func setupCgroups() error {
	entries, err := os.ReadDir("/sys/fs/cgroup")
	if err != nil {
		return err
	}
	for _, e := range entries {
		parent := filepath.Join("/sys/fs/cgroup", e.Name())
		var fs unix.Statfs_t
		if unix.Statfs(parent, &fs) != nil || (fs.Type != unix.CGROUP_SUPER_MAGIC && fs.Type != unix.CGROUP2_SUPER_MAGIC) {
			continue
		}
		dir := filepath.Join(parent, CgroupDir)
		if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return err
		}
		if e.Name() == "cpuset" {
			for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
				v, err := os.ReadFile(filepath.Join(parent, f))
				if err != nil {
					return err
				}
				if err := os.WriteFile(filepath.Join(dir, f), v, 0o644); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// removeCgroups removes the cluster's cgroups, deepest first.
func removeCgroups() error {
	var errs []error
	for _, root := range cgroupRoots() {
		var dirs []string
		_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		sort.Slice(dirs, func(i, j int) bool { return len(dirs[i]) > len(dirs[j]) })
		for _, d := range dirs {
			var err error
			for i := 0; i < 50; i++ {
				if err = unix.Rmdir(d); err == nil || errors.Is(err, unix.ENOENT) {
					err = nil
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("cgroup %s: %w", d, err))
			}
		}
	}
	return errors.Join(errs...)
}

// mountsUnder lists mount points at or under dir, deepest first.
func mountsUnder(dir string) ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		mp := unescapeMount(fields[4])
		if mp == dir || strings.HasPrefix(mp, dir+"/") {
			out = append(out, mp)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out, sc.Err()
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// unmountUnder detaches every mount under workDir, and the pod network
// namespaces containerd left in /run/netns that were not there before.
func unmountUnder(workDir string, netnsBefore []string) error {
	before := map[string]bool{}
	for _, n := range netnsBefore {
		before[n] = true
	}
	if entries, err := os.ReadDir("/run/netns"); err == nil {
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), "cni-") && !before[e.Name()] {
				p := filepath.Join("/run/netns", e.Name())
				_ = unix.Unmount(p, unix.MNT_DETACH)
				_ = os.Remove(p)
			}
		}
	}
	for i := 0; i < 10; i++ {
		mounts, err := mountsUnder(workDir)
		if err != nil {
			return err
		}
		if len(mounts) == 0 {
			return nil
		}
		for _, m := range mounts {
			_ = unix.Unmount(m, unix.MNT_DETACH)
		}
	}
	mounts, _ := mountsUnder(workDir)
	return fmt.Errorf("cannot unmount %v", mounts)
}
