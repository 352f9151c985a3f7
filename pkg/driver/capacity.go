package driver

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/rclone/rclone/fs"

	"github.com/csi-rclone/csi-rclone/secrets"
)

// KeyCapacity in a volume context (or stage secret) is the volume's size.
// CreateVolume puts the PVC's requested size there.
const KeyCapacity = secrets.KeyCapacity

// capacityKey reads the capacity as secrets.Build reads any key: the secret
// wins over the volume context.
func capacityKey(secret, volumeContext map[string]string) string {
	if v, ok := secret[KeyCapacity]; ok {
		return v
	}
	return volumeContext[KeyCapacity]
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
