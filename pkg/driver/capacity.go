package driver

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/rclone/rclone/fs"

	"github.com/csi-rclone/csi-rclone/pkg/provision"
	"github.com/csi-rclone/csi-rclone/secrets"
)

// KeyCapacity in a volume context (or stage secret) is the volume's size.
// CreateVolume puts the PVC's requested size there.
const KeyCapacity = secrets.KeyCapacity

// volumeSize is what the node knows of a volume's size.
type volumeSize struct {
	// capacity is the KeyCapacity value; "" when unknown.
	capacity string
	// countUsed: the volume is a directory of its own (a provisioned one),
	// so what it holds is its used space.
	countUsed bool
}

// sizeOf reads the capacity as secrets.Build reads any key (the secret wins
// over the volume context).
func sizeOf(volumeID string, secret, volumeContext map[string]string) volumeSize {
	c, ok := secret[KeyCapacity]
	if !ok {
		c = volumeContext[KeyCapacity]
	}
	return volumeSize{capacity: c, countUsed: provision.IsProvisionedID(volumeID)}
}

// vfsDefaults are rclone's VFS options that make statfs show the size:
// vfs_disk_space_total_size is the total. rclone then takes used and free
// from the backend's About where it has one (free is then the remote's, or
// total minus used), else reports used 0 and free = total. For a directory
// volume, vfs_used_is_size counts the bytes under the directory instead
// (one listing per dir_cache_time), so free is total minus what the PVC
// holds on any backend. A tenant's own vfsOpt wins over both.
func (z volumeSize) vfsDefaults() (map[string]string, error) {
	if z.capacity == "" {
		return nil, nil
	}
	n, err := ParseCapacity(z.capacity)
	if err != nil {
		return nil, err
	}
	opts := map[string]string{"vfs_disk_space_total_size": strconv.FormatInt(n, 10) + "B"}
	if z.countUsed {
		opts["vfs_used_is_size"] = "true"
	}
	return opts, nil
}

// ParseCapacity reads plain bytes ("10737418240", as CreateVolume writes
// it) or rclone size syntax ("10Gi", "512M"). rclone alone would read a bare
// number as KiB.
func ParseCapacity(s string) (int64, error) {
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		if n <= 0 {
			return 0, fmt.Errorf("%w: %s must be positive", secrets.ErrInvalid, KeyCapacity)
		}
		return n, nil
	}
	// Without a unit rclone would read KiB: "1.5" or "1e3" say nothing clear.
	unitless := s == "" || strings.ContainsRune("0123456789.", rune(s[len(s)-1]))
	var size fs.SizeSuffix
	if err := size.Set(s); unitless || err != nil || size <= 0 {
		return 0, fmt.Errorf("%w: %s %q is neither bytes nor a size such as 10Gi", secrets.ErrInvalid, KeyCapacity, s)
	}
	return int64(size), nil
}
