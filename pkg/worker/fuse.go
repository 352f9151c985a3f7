package worker

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/rclone/rclone/cmd/mountlib"
	"github.com/rclone/rclone/fs/config/configmap"
	"github.com/rclone/rclone/fs/config/configstruct"
	"github.com/rclone/rclone/vfs/vfscommon"
	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"github.com/csi-rclone/csi-rclone/secrets"
)

// The driver, as root, opens /dev/fuse and mounts it; the worker inherits
// the open device as this file descriptor and serves it through go-fuse's
// "/dev/fd/N" mount point. So the worker needs neither /dev/fuse nor the
// setuid fusermount3, and can run with no_new_privs.
const fuseFD = 4 // after stdin, stdout, stderr and the events pipe

// fuseMountPoint is the mount point a worker hands to rclone.
var fuseMountPoint = fmt.Sprintf("/dev/fd/%d", fuseFD)

// isInheritedFUSE reports whether mountPoint names a FUSE device that the
// driver mounted already.
func isInheritedFUSE(mountPoint string) bool { return strings.HasPrefix(mountPoint, "/dev/fd/") }

// maxRead is the max_read rclone's mount2 passes (go-fuse sets it to its
// MaxWrite of 1 MiB, what Linux 4.20+ allows in one request).
const maxRead = 1 << 20

// kernelMount is what the driver tells the kernel for a worker's mount:
// the options rclone's mount2 would have passed to fusermount3.
type kernelMount struct {
	source             string // the first column of mountinfo, rclone's devname
	uid, gid           int    // the FUSE connection's owner: the worker
	readOnly           bool
	allowOther         bool
	defaultPermissions bool
	readAhead          int64 // bytes; rclone's max_read_ahead
}

// mountFor mounts FUSE at spec.MountPoint with the kernel options of
// spec's volume, for a worker that runs as opts' uid and gid: the first
// step of Start and of StartOn. A failed mount is ErrMount.
func mountFor(spec *Spec, opts Options) (*os.File, error) {
	km, err := kernelMountOf(&spec.Volume, opts.UID, opts.GID)
	if err != nil {
		return nil, err
	}
	dev, err := mountFUSE(spec.MountPoint, km)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrMount, err)
	}
	return dev, nil
}

// kernelMountOf reads the mount options of vol as rclone does.
func kernelMountOf(vol *secrets.Volume, uid, gid int) (kernelMount, error) {
	mountOpt, vfsOpt, err := rcloneOptions(vol, mountlib.Options{}, vfscommon.Options{})
	if err != nil {
		return kernelMount{}, err
	}
	source := mountOpt.DeviceName
	if source == "" {
		source = vol.FsString()
	}
	return kernelMount{
		source: source, uid: uid, gid: gid,
		readOnly: vfsOpt.ReadOnly,
		// The kernel has no allow_root: fusermount3 turns it into
		// allow_other, which lets root in too.
		allowOther: mountOpt.AllowOther || mountOpt.AllowRoot,
		// go-fuse adds default_permissions for ID-mapped mounts.
		defaultPermissions: mountOpt.DefaultPermissions || mountOpt.AllowIDMap,
		readAhead:          int64(mountOpt.MaxReadAhead),
	}, nil
}

// rcloneOptions lays the volume's mount and VFS options over the given
// defaults.
func rcloneOptions(vol *secrets.Volume, mountOpt mountlib.Options, vfsOpt vfscommon.Options) (mountlib.Options, vfscommon.Options, error) {
	if err := configstruct.Set(configmap.Simple(vol.VFSOpt), &vfsOpt); err != nil {
		return mountOpt, vfsOpt, fmt.Errorf("%w: vfsOpt: %v", ErrInvalid, err)
	}
	if err := configstruct.Set(configmap.Simple(vol.MountOpt), &mountOpt); err != nil {
		return mountOpt, vfsOpt, fmt.Errorf("%w: mountOpt: %v", ErrInvalid, err)
	}
	return mountOpt, vfsOpt, nil
}

// mountFUSE opens /dev/fuse and mounts it at mountPoint, as fusermount3
// would. The kernel queues its INIT request until the worker serves the
// returned device; meanwhile only root can reach the mount point. The
// caller closes the file once the worker has it: while the driver holds a
// copy, a dead worker would leave the mount hanging instead of failing.
func mountFUSE(mountPoint string, m kernelMount) (*os.File, error) {
	var st unix.Stat_t
	if err := unix.Stat(mountPoint, &st); err != nil {
		return nil, fmt.Errorf("mount point: %w", err)
	}
	fd, err := unix.Open("/dev/fuse", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("opening /dev/fuse: %w", err)
	}
	data := fmt.Sprintf("fd=%d,rootmode=%o,user_id=%d,group_id=%d,max_read=%d", fd, st.Mode&unix.S_IFMT, m.uid, m.gid, maxRead)
	if m.allowOther {
		data += ",allow_other"
	}
	if m.defaultPermissions {
		data += ",default_permissions"
	}
	flags := uintptr(unix.MS_NOSUID | unix.MS_NODEV)
	if m.readOnly {
		flags |= unix.MS_RDONLY
	}
	if err := unix.Mount(m.source, mountPoint, "fuse.rclone", flags, data); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("mounting FUSE at %s: %w", mountPoint, err)
	}
	if err := setReadAhead(mountPoint, m.readAhead); err != nil {
		klog.ErrorS(err, "the mount keeps the kernel's read-ahead", "mountPoint", mountPoint)
	}
	return os.NewFile(uintptr(fd), "/dev/fuse"), nil
}

// unmountFUSE undoes mountFUSE after a worker failed to start.
func unmountFUSE(mountPoint string) error {
	err := unix.Unmount(mountPoint, unix.UMOUNT_NOFOLLOW)
	if errors.Is(err, unix.EBUSY) {
		err = unix.Unmount(mountPoint, unix.UMOUNT_NOFOLLOW|unix.MNT_DETACH)
	}
	if errors.Is(err, unix.EINVAL) {
		return nil // not mounted
	}
	return err
}
