package driver_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	mount "k8s.io/mount-utils"

	"github.com/csi-rclone/csi-rclone/test/harness"
	"github.com/csi-rclone/csi-rclone/test/procfs"
)

// probeEnv makes the test binary a probe: it tries each attempt given on
// its command line, as whatever user it was started as, and prints what
// happened, as JSON, on stdout.
const probeEnv = "CSI_RCLONE_TEST_PROBE"

// An attempt is "op:path": list, read, write (a new file in path), open
// (for reading), signal (path is a pid; signal 0).
func probeMain() {
	out := map[string]string{}
	for _, a := range os.Args[1:] {
		op, path, _ := strings.Cut(a, ":")
		var err error
		switch op {
		case "list":
			_, err = os.ReadDir(path)
		case "read":
			_, err = os.ReadFile(path)
		case "write":
			err = os.WriteFile(filepath.Join(path, "probe.txt"), []byte("probe"), 0o644)
		case "open":
			var f *os.File
			if f, err = os.Open(path); err == nil {
				f.Close()
			}
		case "signal":
			var pid int
			if pid, err = strconv.Atoi(path); err == nil {
				err = syscall.Kill(pid, 0)
			}
		default:
			err = fmt.Errorf("unknown op %q", op)
		}
		out[a] = ""
		if err != nil {
			out[a] = err.Error()
		}
	}
	_ = json.NewEncoder(os.Stdout).Encode(out)
	os.Exit(0)
}

// probeAs runs attempts as uid:gid with no supplementary group.
func probeAs(t *testing.T, e *harness.Env, uid int, attempts ...string) map[string]string {
	t.Helper()
	cmd := exec.Command(filepath.Join(e.Dir, "csi-rclone-worker"), attempts...)
	cmd.Env = []string{probeEnv + "=1"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid), Groups: []uint32{}}}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	raw, err := cmd.Output()
	if err != nil {
		t.Fatalf("probe as %d: %v: %s", uid, err, stderr.String())
	}
	out := map[string]string{}
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("probe output %q: %v", raw, err)
	}
	return out
}

// tenant is what a test knows of one staged volume's worker.
type tenant struct {
	v                  *vol
	pid, uid           int
	mountDir, cacheDir string
	cacheFile          string // a file rclone cached for it
}

// workerPID finds the one live worker of a volume in e.
func workerPID(t *testing.T, e *harness.Env, volumeID string) int {
	t.Helper()
	pids := e.WorkerPIDs(volumeID)
	if len(pids) != 1 {
		t.Fatalf("%d workers for %s, want 1", len(pids), volumeID)
	}
	return pids[0]
}

// newTenant stages a volume on its own bucket and writes a file through it,
// so that its mount and its cache have something to steal. (The S3 server
// sees buckets made before its first listing only: make them all first.)
func newTenant(t *testing.T, e *harness.Env, name string) *tenant {
	t.Helper()
	v := newVol(t, e, "vol-"+name, name)
	v.mustStage()
	if err := os.WriteFile(filepath.Join(v.staging, "secret.txt"), []byte("data of "+name), 0o644); err != nil {
		t.Fatal(err)
	}
	tn := &tenant{v: v, pid: workerPID(t, e, v.id)}
	uids := strings.Fields(procfs.Status(t, tn.pid)["Uid"])
	if len(uids) != 4 {
		t.Fatalf("worker status Uid %v", uids)
	}
	tn.uid, _ = strconv.Atoi(uids[0])

	// Its FUSE mount, by the source rclone names it by.
	infos, err := mount.ParseMountInfo("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, mi := range infos {
		if mi.FsType == "fuse.rclone" && mi.Source == harness.RemoteName+":"+name && strings.HasPrefix(mi.MountPoint, filepath.Join(e.Dir, "state", "mnt")+"/") {
			tn.mountDir = mi.MountPoint
		}
	}
	if tn.mountDir == "" {
		t.Fatalf("no FUSE mount of %s under the state dir", name)
	}
	// Its cache dir is the one its uid owns.
	caches, _ := filepath.Glob(filepath.Join(e.Dir, "cache", "*"))
	for _, c := range caches {
		var st syscall.Stat_t
		if syscall.Stat(c, &st) == nil && int(st.Uid) == tn.uid {
			tn.cacheDir = c
		}
	}
	if tn.cacheDir == "" {
		t.Fatalf("no cache dir owned by uid %d in %v", tn.uid, caches)
	}
	_ = filepath.WalkDir(tn.cacheDir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() && d.Name() == "secret.txt" && strings.Contains(p, "/vfs/") {
			tn.cacheFile = p
		}
		return nil
	})
	if tn.cacheFile == "" {
		t.Fatalf("rclone cached nothing of %s in %s", name, tn.cacheDir)
	}
	return tn
}

// A tenant who takes over their own mount worker gets that worker's uid.
// As that uid (and gid, without supplementary groups; and without the
// worker's Landlock rules, so a stronger attacker than the worker itself)
// they cannot reach another volume's mount, staging path, cache or worker.
// The same attempts as the other volume's own uid work, so the denials come
// from the isolation, not from a broken setup.
func TestWorkersAreIsolatedFromEachOther(t *testing.T) {
	e := startEnv(t)
	for _, bucket := range []string{"alice", "bob"} {
		if err := e.S3.MakeBucket(bucket); err != nil {
			t.Fatal(err)
		}
	}
	a, b := newTenant(t, e, "alice"), newTenant(t, e, "bob")
	if a.uid == b.uid {
		t.Fatalf("both workers run as uid %d", a.uid)
	}
	for _, tn := range []*tenant{a, b} {
		if !harness.WorkerUIDs.Contains(tn.uid) {
			t.Errorf("worker uid %d is outside %s", tn.uid, harness.WorkerUIDs)
		}
	}

	proc := func(pid int, f string) string { return fmt.Sprintf("/proc/%d/%s", pid, f) }
	files := func(tn *tenant) []string {
		return []string{
			"list:" + tn.mountDir, "read:" + filepath.Join(tn.mountDir, "secret.txt"), "write:" + tn.mountDir,
			"list:" + tn.cacheDir, "read:" + tn.cacheFile, "write:" + tn.cacheDir,
		}
	}
	// The per-volume dir around the mount point: root's, the worker's group
	// may pass (0710), nobody may list or write it.
	volDir := func(tn *tenant) []string {
		d := filepath.Dir(tn.mountDir)
		return []string{"list:" + d, "write:" + d}
	}
	workerProc := func(tn *tenant) []string {
		return []string{"open:" + proc(tn.pid, "mem"), "open:" + proc(tn.pid, "environ"), "open:" + proc(tn.pid, "maps"), "list:" + proc(tn.pid, "fd"), "signal:" + strconv.Itoa(tn.pid)}
	}
	staging := func(tn *tenant) []string {
		return []string{"list:" + tn.v.staging, "read:" + filepath.Join(tn.v.staging, "secret.txt"), "write:" + tn.v.staging}
	}

	// Alice against Bob: everything denied.
	attack := slices.Concat(files(b), volDir(b), workerProc(b), staging(b))
	for at, err := range probeAs(t, e, a.uid, attack...) {
		if !strings.Contains(err, "permission denied") && !strings.Contains(err, "operation not permitted") {
			t.Errorf("as alice's worker uid %d: %s: %q, want it denied", a.uid, at, err)
		}
	}

	// Control: Bob's uid reaches Bob's own dirs, and sees its worker's
	// status; not its memory, environment or fds even so, because the
	// worker is not dumpable.
	control := probeAs(t, e, b.uid, append(files(b), "read:"+proc(b.pid, "status"))...)
	for at, err := range control {
		if err != "" {
			t.Errorf("as bob's own uid %d: %s: %q, want it to work", b.uid, at, err)
		}
	}
	for at, err := range probeAs(t, e, b.uid, slices.Concat(workerProc(b)[:4], volDir(b))...) {
		if !strings.Contains(err, "permission denied") {
			t.Errorf("as bob's own uid %d: %s: %q, want it denied (not dumpable; the volume dir root's)", b.uid, at, err)
		}
	}
	// The staging path is the kubelet's: its 0750 root-owned parents keep
	// every uid out, the volume's own included; root reads it.
	if got, err := os.ReadFile(filepath.Join(b.v.staging, "secret.txt")); err != nil || string(got) != "data of bob" {
		t.Fatalf("root reads bob's staging path: %q, %v", got, err)
	}
}

// Every worker is confined: no_new_privs, no capability at all (not even in
// its bounding set), not dumpable, and its uid from the range. (Landlock is
// tested in pkg/sandbox, where a child can try what it is denied.)
func TestWorkerIsConfined(t *testing.T) {
	e := startEnv(t)
	if err := e.S3.MakeBucket("conf"); err != nil {
		t.Fatal(err)
	}
	tn := newTenant(t, e, "conf")
	st := procfs.Status(t, tn.pid)
	for k, want := range map[string]string{
		"NoNewPrivs": "1", "CapEff": "0000000000000000", "CapPrm": "0000000000000000",
		"CapInh": "0000000000000000", "CapAmb": "0000000000000000", "CapBnd": "0000000000000000",
		"Groups": "",
	} {
		if st[k] != want {
			t.Errorf("worker %s: %q, want %q", k, st[k], want)
		}
	}
	if want := strings.Repeat(strconv.Itoa(tn.uid)+"\t", 4); st["Uid"]+"\t" != want || st["Gid"]+"\t" != want {
		t.Errorf("worker Uid %q, Gid %q; want %d everywhere", st["Uid"], st["Gid"], tn.uid)
	}
	// Not dumpable: the kernel makes root the owner of its /proc files.
	var s syscall.Stat_t
	if err := syscall.Stat(fmt.Sprintf("/proc/%d/environ", tn.pid), &s); err != nil || s.Uid != 0 {
		t.Errorf("/proc/%d/environ owned by %d (%v), want 0: the worker is dumpable", tn.pid, s.Uid, err)
	}
	// Its memory is bounded: a listing a tenant's server sends costs that
	// worker alone.
	limits, err := os.ReadFile(fmt.Sprintf("/proc/%d/limits", tn.pid))
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("Max data size             %d           %d           bytes", harness.WorkerMemoryLimit, harness.WorkerMemoryLimit)
	if !strings.Contains(string(limits), want) {
		t.Errorf("worker limits do not hold %q:\n%s", want, limits)
	}
	// The worker holds the FUSE device the driver opened, not one of its own.
	fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", tn.pid))
	fuse := 0
	for _, fd := range fds {
		if l, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", tn.pid, fd.Name())); l == "/dev/fuse" {
			fuse++
		}
	}
	if fuse != 1 {
		t.Errorf("worker holds %d /dev/fuse fds, want 1", fuse)
	}
}
