package worker

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	mountutils "k8s.io/mount-utils"
)

// kernelReadAhead is what Linux gives a FUSE mount's read-ahead: it takes
// the smaller of the server's max_readahead and the bdi's default, 128 KiB.
const kernelReadAhead = 128 << 10

// setReadAhead raises the read-ahead of the FUSE mount at mountPoint to
// bytes (rclone's --max-read-ahead), which only root can do, through the
// mount's bdi in sysfs. The kernel then asks the worker for up to 1 MiB
// (max_read) at a time and several such reads ahead while the program reads,
// instead of 128 KiB at a time: sequential reads through FUSE go about
// a third faster here (docs/benchmarks.md, "Defaults"). The mount stays
// correct without it; the caller logs a failure.
func setReadAhead(mountPoint string, bytes int64) error {
	if bytes <= kernelReadAhead {
		return nil
	}
	// A stat would wait for the worker's INIT, which comes later: the
	// device number is in mountinfo already.
	infos, err := mountutils.ParseMountInfo("/proc/self/mountinfo")
	if err != nil {
		return fmt.Errorf("reading mountinfo: %w", err)
	}
	mp := filepath.Clean(mountPoint)
	dev := ""
	for _, in := range infos { // the last one is on top
		if in.MountPoint == mp {
			dev = fmt.Sprintf("%d:%d", in.Major, in.Minor)
		}
	}
	if dev == "" {
		return fmt.Errorf("%s is not in mountinfo", mp)
	}
	kb := strconv.FormatInt(bytes>>10, 10)
	if err := os.WriteFile(filepath.Join("/sys/class/bdi", dev, "read_ahead_kb"), []byte(kb), 0); err != nil {
		return fmt.Errorf("setting the read-ahead of %s: %w", dev, err)
	}
	return nil
}
