//go:build linux

package sandbox

import (
	"bufio"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/csi-rclone/csi-rclone/test/procfs"
)

const childEnv = "SANDBOX_TEST_CHILD_CACHE"

// TestMain lets the test binary be the confined child: it confines
// itself, tries what a taken-over worker would, reports, and waits for
// the parent to look at it from outside.
func TestMain(m *testing.M) {
	if dir := os.Getenv(childEnv); dir != "" {
		child(dir, os.Getenv("SANDBOX_TEST_OUTSIDE"))
	}
	os.Exit(m.Run())
}

// report is what the child saw after Confine.
type report struct {
	Result   Result
	Dumpable int
	Errs     map[string]string // attempt → error ("" = worked)
}

func child(cacheDir, outside string) {
	res, err := Confine(Options{CacheDir: cacheDir})
	if err != nil {
		fmt.Fprintln(os.Stderr, "confine:", err)
		os.Exit(3)
	}
	rep := report{Result: res, Errs: map[string]string{}}
	dumpable, _ := unix.PrctlRetInt(unix.PR_GET_DUMPABLE, 0, 0, 0, 0)
	rep.Dumpable = dumpable
	try := func(what string, f func() error) {
		rep.Errs[what] = ""
		if err := f(); err != nil {
			rep.Errs[what] = err.Error()
		}
	}
	read := func(p string) func() error { return func() error { _, err := os.ReadFile(p); return err } }
	list := func(p string) func() error { return func() error { _, err := os.ReadDir(p); return err } }
	try("read outside file", read(filepath.Join(outside, "world-readable")))
	try("list outside dir", list(outside))
	try("read /etc/passwd", read("/etc/passwd"))
	try("list /", list("/"))
	try("read /proc/self/environ", read("/proc/self/environ"))
	try("write outside dir", func() error { return os.WriteFile(filepath.Join(outside, "new"), nil, 0o644) })
	try("list /etc/ssl", list("/etc/ssl"))
	try("read /etc/hosts", read("/etc/hosts"))
	try("write /dev/null", func() error { return os.WriteFile("/dev/null", []byte("x"), 0) })
	try("write, rename, read in cache dir", func() error {
		if err := os.MkdirAll(filepath.Join(cacheDir, "vfs", "a"), 0o700); err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Join(cacheDir, "vfs", "b"), 0o700); err != nil {
			return err
		}
		src, dst := filepath.Join(cacheDir, "vfs", "a", "f"), filepath.Join(cacheDir, "vfs", "b", "f")
		if err := os.WriteFile(src, []byte("data"), 0o600); err != nil {
			return err
		}
		if err := os.Rename(src, dst); err != nil {
			return err
		}
		if err := os.Truncate(dst, 2); err != nil {
			return err
		}
		_, err := os.ReadFile(dst)
		return err
	})
	try("exec", func() error { return exec.Command("/bin/true").Run() })
	// What TLS to a cloud endpoint needs: the system's CA certificates.
	try("system CA pool", func() error {
		pool, err := x509.SystemCertPool()
		if err == nil && len(pool.Subjects()) == 0 { //nolint:staticcheck // a count is all this needs
			err = errors.New("no CA certificates")
		}
		return err
	})
	try("time zone", func() error { _, err := time.LoadLocation("Europe/Berlin"); return err })
	_ = json.NewEncoder(os.Stdout).Encode(rep)
	_, _ = io.Copy(io.Discard, os.Stdin) // until the parent has looked
	os.Exit(0)
}

func TestConfine(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to start children as other users")
	}
	for _, tc := range []struct {
		name string
		cred *syscall.Credential
		caps []uintptr
	}{
		// As the driver starts a worker: an unprivileged uid handed
		// CAP_SETPCAP so that it can empty its bounding set.
		{"worker uid with CAP_SETPCAP", &syscall.Credential{Uid: 2000000001, Gid: 2000000001, Groups: []uint32{}}, []uintptr{unix.CAP_SETPCAP}},
		// Root with every capability: Confine must take them all.
		{"root", nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			top := t.TempDir()
			for _, d := range []string{filepath.Dir(top), top} {
				if err := os.Chmod(d, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			cache, outside := filepath.Join(top, "cache"), filepath.Join(top, "outside")
			for _, d := range []string{cache, outside} {
				if err := os.Mkdir(d, 0o777); err != nil {
					t.Fatal(err)
				}
				if err := os.Chmod(d, 0o777); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.WriteFile(filepath.Join(outside, "world-readable"), []byte("x"), 0o644); err != nil {
				t.Fatal(err)
			}
			// The test binary may sit where the other uid cannot run it.
			bin := filepath.Join(top, "sandbox.test")
			if err := copyFile(bin); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(bin, "-test.run=^$")
			cmd.Env = []string{childEnv + "=" + cache, "SANDBOX_TEST_OUTSIDE=" + outside}
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: tc.cred, AmbientCaps: tc.caps}
			cmd.Stderr = os.Stderr
			stdin, err := cmd.StdinPipe()
			if err != nil {
				t.Fatal(err)
			}
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer cmd.Wait()
			defer stdin.Close()
			var rep report
			if err := json.NewDecoder(bufio.NewReader(stdout)).Decode(&rep); err != nil {
				t.Fatalf("child report: %v", err)
			}

			status := procfs.Status(t, cmd.Process.Pid)
			for k, want := range map[string]string{
				"NoNewPrivs": "1", "CapEff": "0000000000000000", "CapPrm": "0000000000000000",
				"CapInh": "0000000000000000", "CapAmb": "0000000000000000", "CapBnd": "0000000000000000",
			} {
				if status[k] != want {
					t.Errorf("%s: %s, want %s", k, status[k], want)
				}
			}
			if rep.Dumpable != 0 {
				t.Errorf("dumpable %d, want 0", rep.Dumpable)
			}
			if !rep.Result.BoundingSetDropped {
				t.Error("bounding set not dropped")
			}

			kernelABI := landlockABI()
			t.Logf("kernel Landlock ABI %d, applied %d", kernelABI, rep.Result.LandlockABI)
			allowed := []string{"list /etc/ssl", "read /etc/hosts", "write /dev/null", "write, rename, read in cache dir"}
			// As far as this machine has them.
			if _, err := os.Stat("/etc/ssl/certs/ca-certificates.crt"); err == nil {
				allowed = append(allowed, "system CA pool")
			}
			if _, err := os.Stat("/usr/share/zoneinfo/Europe/Berlin"); err == nil {
				allowed = append(allowed, "time zone")
			}
			denied := []string{"read outside file", "list outside dir", "read /etc/passwd", "list /", "read /proc/self/environ", "write outside dir", "exec"}
			for _, what := range allowed {
				if e, ok := rep.Errs[what]; !ok || (e != "" && !(what == "list /etc/ssl" && strings.Contains(e, "no such file"))) {
					t.Errorf("%s: %q, want it to work", what, e)
				}
			}
			if kernelABI == 0 {
				t.Skip("no Landlock in this kernel: the filesystem is not restricted")
			}
			if rep.Result.LandlockABI == 0 {
				t.Fatal("the kernel has Landlock, but Confine did not apply it")
			}
			for _, what := range denied {
				if e := rep.Errs[what]; !strings.Contains(e, "permission denied") {
					t.Errorf("%s: %q, want permission denied", what, e)
				}
			}
		})
	}
}

func landlockABI() int {
	v, _, err := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, unix.LANDLOCK_CREATE_RULESET_VERSION)
	if err != 0 {
		return 0
	}
	return int(v)
}

func copyFile(dst string) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	in, err := os.Open(self)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return errors.Join(out.Close(), os.Chmod(dst, 0o755))
}
