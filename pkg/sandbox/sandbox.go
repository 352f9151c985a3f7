//go:build linux

// Package sandbox confines a mount worker before it reads anything a tenant
// wrote. A worker runs tenant-controlled rclone code, so the package assumes
// that code will be taken over, and limits what it can reach then:
//
//   - no_new_privs: no exec can gain privileges (setuid, file capabilities);
//   - no capabilities: effective, permitted, inheritable, ambient and (where
//     the worker was handed CAP_SETPCAP to do it) bounding sets emptied;
//   - not dumpable: no process of any uid but root's can ptrace the worker or
//     open its /proc/<pid>/mem, environ, maps or fd, its own uid included;
//   - Landlock, where the kernel has it: read-only access to what rclone
//     reads (CA certificates, resolver files, time zones), read-write to the
//     volume's cache dir, and nothing else of the filesystem; no signals to
//     and no abstract unix sockets of processes outside the sandbox.
//
// The uid of its own (one per volume) and the FUSE device it serves without
// opening it are the driver's part; see pkg/uidpool and pkg/worker.
package sandbox

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"unsafe"

	"github.com/landlock-lsm/go-landlock/landlock"
	llsyscall "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"
)

// Options say what a confined worker may still reach.
type Options struct {
	// CacheDir is the volume's VFS cache: the one directory it may write.
	CacheDir string
	// ReadOnly lists more paths it may read; nil means DefaultReadOnly.
	ReadOnly []string
}

// DefaultReadOnly is what rclone reads at run time: CA certificates (the
// Debian, Red Hat and Alpine places; the symlinks in /etc/ssl/certs point
// into /usr/share/ca-certificates), the resolver's files, time zones, MIME
// types for uploads, and go-fuse's page limit. Missing paths are skipped.
var DefaultReadOnly = []string{
	"/etc/ssl", "/etc/pki", "/etc/ca-certificates", "/usr/share/ca-certificates",
	"/usr/local/share/ca-certificates", "/etc/ca-certificates.conf",
	"/etc/resolv.conf", "/etc/hosts", "/etc/nsswitch.conf", "/etc/host.conf", "/etc/gai.conf",
	"/etc/services", "/etc/protocols",
	"/etc/localtime", "/usr/share/zoneinfo",
	"/etc/mime.types", "/usr/share/mime/globs2",
	"/proc/sys/fs/fuse",
	"/dev/urandom",
}

// Result says what was applied.
type Result struct {
	// LandlockABI is the Landlock ABI version the rules were applied at; 0
	// when the kernel has no Landlock (the rest still applies).
	LandlockABI int
	// BoundingSetDropped is true when the capability bounding set could be
	// emptied (the process held CAP_SETPCAP, as workers started by the
	// driver do).
	BoundingSetDropped bool
}

// Confine applies the sandbox to the whole process, every thread. It is
// not undone; on error the process must exit.
func Confine(opts Options) (Result, error) {
	var res Result
	if opts.CacheDir == "" {
		return res, errors.New("sandbox: no cache dir")
	}
	if err := llsyscall.AllThreadsPrctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return res, fmt.Errorf("sandbox: no_new_privs: %w", err)
	}
	dropped, err := dropCapabilities()
	if err != nil {
		return res, err
	}
	res.BoundingSetDropped = dropped

	if abi, err := llsyscall.LandlockGetABIVersion(); err == nil {
		res.LandlockABI = min(abi, maxABI)
	}
	ro := opts.ReadOnly
	if ro == nil {
		ro = DefaultReadOnly
	}
	if err := restrictPaths(opts.CacheDir, ro); err != nil {
		return res, err
	}
	// Last: a change of credentials may reset it.
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return res, fmt.Errorf("sandbox: dumpable: %w", err)
	}
	return res, nil
}

// maxABI is the newest Landlock ABI the rules are written for.
const maxABI = 11

// The rights granted: reading and listing, never executing anything.
const (
	readFile = llsyscall.AccessFSReadFile
	readDir  = llsyscall.AccessFSReadFile | llsyscall.AccessFSReadDir
)

func restrictPaths(cacheDir string, readOnly []string) error {
	// Filesystem and IPC scopes, not the network: rclone connects wherever
	// the tenant's remote is.
	cfg := landlock.Config{HandledAccessFS: landlock.V11.HandledAccessFS, Scoped: landlock.V11.Scoped}.BestEffort()
	rules := []landlock.Rule{
		landlock.RWDirs(cacheDir).WithRefer(), // rclone renames cache items across dirs
		landlock.RWFiles("/dev/null").IgnoreIfMissing(),
	}
	for _, p := range readOnly {
		fi, err := os.Stat(p)
		if err != nil {
			continue // not on this node: nothing to grant
		}
		access := landlock.AccessFSSet(readFile)
		if fi.IsDir() {
			access = landlock.AccessFSSet(readDir)
		}
		rules = append(rules, landlock.PathAccess(access, p).IgnoreIfMissing())
	}
	if err := cfg.Restrict(rules...); err != nil {
		return fmt.Errorf("sandbox: landlock: %w", err)
	}
	return nil
}

// dropCapabilities empties the ambient set, the bounding set where it may
// (it needs CAP_SETPCAP), then effective, permitted and inheritable, on
// every thread. It reports whether the bounding set is now empty.
func dropCapabilities() (bool, error) {
	if err := llsyscall.AllThreadsPrctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil && !errors.Is(err, unix.EINVAL) {
		return false, fmt.Errorf("sandbox: clearing ambient capabilities: %w", err)
	}
	bounding := true
	for c := 0; c <= lastCap(); c++ {
		if err := llsyscall.AllThreadsPrctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil {
			bounding = false // EPERM without CAP_SETPCAP; the rest still goes
			break
		}
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData // all zero
	if err := allThreadsCapset(&hdr, &data[0]); err != nil {
		return false, fmt.Errorf("sandbox: dropping capabilities: %w", err)
	}
	return bounding, nil
}

// allThreadsCapset is capset(2) on every thread: capabilities belong to a
// thread, not to the process.
func allThreadsCapset(hdr *unix.CapUserHeader, data *unix.CapUserData) error {
	return allThreadsSyscall(unix.SYS_CAPSET, uintptr(unsafe.Pointer(hdr)), uintptr(unsafe.Pointer(data)))
}

// lastCap is the highest capability number the kernel knows.
func lastCap() int {
	raw, err := os.ReadFile("/proc/sys/kernel/cap_last_cap")
	if err != nil {
		return unix.CAP_LAST_CAP
	}
	var n int
	if _, err := fmt.Sscan(strings.TrimSpace(string(raw)), &n); err != nil {
		return unix.CAP_LAST_CAP
	}
	return n
}
