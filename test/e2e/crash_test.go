package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/csi-rclone/csi-rclone/test/kubelet"
)

// writeDelays are how long before the crash each file is written: from
// "just closed" to "past rclone's 5 s write-back delay", so that some files
// are uploaded before the crash and some only after it.
var writeDelays = []time.Duration{8 * time.Second, 5 * time.Second, 2 * time.Second, 500 * time.Millisecond, 0}

// TestCrashKeepsRecentWrites kills the driver (and, separately, one worker)
// with SIGKILL shortly after a container wrote files, and checks that each
// file reads back in the container with its content after recovery, takes
// an append, and reaches the bucket as the container last saw it.
func TestCrashKeepsRecentWrites(t *testing.T) {
	for _, tc := range []struct {
		name  string
		crash func(e *env, vol kubelet.Volume)
	}{
		{"driver killed", func(e *env, vol kubelet.Volume) {
			e.driver.kill9()
			killWorkers() // the driver's death kills them (Pdeathsig); make sure
		}},
		{"worker killed", func(e *env, vol kubelet.Volume) { killWorkers(vol.Handle) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			ctx := context.Background()
			vol := kubelet.Volume{PV: "pv-crash", Handle: "crash-vol", Capability: rwx(),
				Secret: map[string]string{"remote": "s3", "remotePath": "shared", "configData": e.s3.RcloneConfig("s3")}}
			e.startDriver(t)
			if err := e.kubelet.Stage(ctx, vol); err != nil {
				t.Fatal(err)
			}
			target, err := e.kubelet.Publish(ctx, vol, "pod-crash", false)
			if err != nil {
				t.Fatal(err)
			}
			ctr := startContainer(t, e, "crash", target)

			if out, err := ctr.run("mkdir", "-p", filepath.Join(ctr.dir, "sub", "deeper")); err != nil {
				t.Fatalf("mkdir: %v %s", err, out)
			}
			want := map[string]string{}
			var names []string // in the order written
			crashAt := time.Now().Add(writeDelays[0])
			for _, d := range writeDelays {
				time.Sleep(time.Until(crashAt.Add(-d)))
				for _, name := range []string{fmt.Sprintf("written-%s-before.txt", d), fmt.Sprintf("sub/deeper/written-%s-before.txt", d)} {
					want[name] = fmt.Sprintf("%s: %s written %s before the crash", tc.name, name, d)
					names = append(names, name)
					if err := ctr.write(name, want[name]); err != nil {
						t.Fatal(err)
					}
				}
				if d == 500*time.Millisecond { // a file the bucket has an older version of
					want["seed.txt"] = "seed rewritten just before the crash"
					names = append(names, "seed.txt")
					if err := ctr.write("seed.txt", want["seed.txt"]); err != nil {
						t.Fatal(err)
					}
				}
			}
			tc.crash(e, vol)
			crash := time.Now()
			if tc.name == "driver killed" {
				e.startDriver(t)
			}

			// As a program in the pod would: stat first, then read.
			eventually(t, recoveryBound, "the container stats its files again", func() error {
				for _, name := range names {
					out, err := ctr.run("stat", "-c", "%s", filepath.Join(ctr.dir, name))
					if err != nil {
						return fmt.Errorf("%s: %v %s", name, err, out)
					}
					if out != fmt.Sprint(len(want[name])) {
						t.Errorf("%s: stat says %s bytes, want %d", name, out, len(want[name]))
					}
				}
				return nil
			})
			t.Logf("the container sees its files %s after the crash", time.Since(crash).Round(time.Millisecond))
			for _, name := range names {
				// The first read must be right: a wrong one is what rclone's
				// cache would keep.
				got, err := ctr.read(name)
				if err != nil || got != want[name] {
					t.Errorf("%s after the crash: %q %v, want %q", name, got, err, want[name])
				}
				if err := ctr.appendTo(name, " +more"); err != nil {
					t.Fatal(err)
				}
				want[name] += " +more"
				if got, err := ctr.read(name); err != nil || got != want[name] {
					t.Errorf("%s after append: %q %v, want %q", name, got, err, want[name])
				}
			}
			logs, _ := filepath.Glob(filepath.Join(e.dir, "driver-*.log"))
			for _, l := range logs {
				data, _ := os.ReadFile(l)
				for _, line := range strings.Split(string(data), "\n") {
					if strings.Contains(line, "previous worker left") {
						t.Logf("%s: %s", filepath.Base(l), line[strings.Index(line, "worker:"):])
					}
				}
			}
			for name, content := range want {
				eventually(t, 30*time.Second, name+" reaches the bucket", func() error {
					got, err := os.ReadFile(e.s3.Object("shared", name))
					if err != nil || string(got) != content {
						return fmt.Errorf("%q %v", got, err)
					}
					return nil
				})
			}
			// A later worker sees the same files.
			killWorkers(vol.Handle)
			for name, content := range want {
				var got string
				eventually(t, recoveryBound, name+" readable after one more crash", func() (err error) {
					got, err = ctr.read(name)
					return err
				})
				if got != content {
					t.Errorf("%s after one more crash: %q, want %q", name, got, content)
				}
			}
			ctr.stop()
			if err := e.kubelet.Unpublish(ctx, vol, "pod-crash"); err != nil {
				t.Fatal(err)
			}
			if err := e.kubelet.Unstage(ctx, vol); err != nil {
				t.Fatal(err)
			}
			if left, _ := os.ReadDir(filepath.Join(e.cacheDir)); len(left) != 0 {
				t.Errorf("cache dirs left after unstage: %v", left)
			}
		})
	}
}
