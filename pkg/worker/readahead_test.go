package worker

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	mountutils "k8s.io/mount-utils"
)

// mountFUSE gives the mount the read-ahead asked for, through its bdi,
// before any worker serves it; 128 KiB or less leaves the kernel's.
func TestMountFUSESetsReadAhead(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skip("no /dev/fuse")
	}
	for _, tc := range []struct {
		readAhead int64
		wantKB    string
	}{
		{readAhead: 4 << 20, wantKB: "4096"},
		{readAhead: 1 << 20, wantKB: "1024"},
		{readAhead: 0, wantKB: "128"},
	} {
		t.Run(fmt.Sprint(tc.readAhead), func(t *testing.T) {
			dir := t.TempDir()
			dev, err := mountFUSE(dir, kernelMount{source: "test", uid: 1, gid: 1, readAhead: tc.readAhead})
			if err != nil {
				t.Fatal(err)
			}
			// No worker: closing the device aborts the connection.
			defer func() { dev.Close(); _ = unmountFUSE(dir) }()
			infos, err := mountutils.ParseMountInfo("/proc/self/mountinfo")
			if err != nil {
				t.Fatal(err)
			}
			bdi := ""
			for _, in := range infos {
				if in.MountPoint == filepath.Clean(dir) {
					bdi = fmt.Sprintf("/sys/class/bdi/%d:%d/read_ahead_kb", in.Major, in.Minor)
				}
			}
			if bdi == "" {
				t.Fatal("the mount is not in mountinfo")
			}
			got, err := os.ReadFile(bdi)
			if err != nil {
				t.Fatal(err)
			}
			if strings.TrimSpace(string(got)) != tc.wantKB {
				t.Errorf("read_ahead_kb = %s, want %s", got, tc.wantKB)
			}
		})
	}
}
