package driver

import (
	"errors"
	"maps"
	"testing"

	"github.com/csi-rclone/csi-rclone/pkg/provision"
	"github.com/csi-rclone/csi-rclone/secrets"
)

func TestParseCapacity(t *testing.T) {
	for in, want := range map[string]int64{
		"10737418240": 10 << 30, // CreateVolume's bytes, not rclone's KiB
		"1":           1,
		"10Gi":        10 << 30,
		"10G":         10 << 30,
		"512M":        512 << 20,
		"1.5T":        3 << 39,
		"100B":        100,
	} {
		if got, err := ParseCapacity(in); err != nil || got != want {
			t.Errorf("ParseCapacity(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"0", "-1", "off", "ten", "10X", "", "1e3"} {
		if _, err := ParseCapacity(in); !errors.Is(err, secrets.ErrInvalid) {
			t.Errorf("ParseCapacity(%q) = %v; want invalid", in, err)
		}
	}
}

func TestApplyOptionsCapacity(t *testing.T) {
	s := &nodeServer{d: &Driver{opts: Options{DefaultUID: 1000, DefaultGID: 1000}}}
	dirID := (&provision.Volume{Name: "pvc-1", Remote: "r", Subdir: "d"}).ID()
	for _, tc := range []struct {
		name, id          string
		secret, context   map[string]string
		tenant            map[string]string
		wantTotal, wantIs string
	}{
		{name: "from CreateVolume", id: "v", context: map[string]string{"capacity": "3221225472"}, wantTotal: "3221225472B"},
		{name: "size syntax in the secret", id: "v", secret: map[string]string{"capacity": "2Gi"}, context: map[string]string{"capacity": "1"}, wantTotal: "2147483648B"},
		{name: "a directory volume counts its bytes", id: dirID, context: map[string]string{"capacity": "1Gi"}, wantTotal: "1073741824B", wantIs: "true"},
		{name: "the tenant's own values win", id: dirID, context: map[string]string{"capacity": "2Gi"},
			tenant: map[string]string{"vfs_disk_space_total_size": "5G", "vfs_used_is_size": "false"}, wantTotal: "5G", wantIs: "false"},
		{name: "unknown", id: dirID},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vol := &secrets.Volume{VFSOpt: maps.Clone(tc.tenant)}
			if err := s.applyOptions(vol, false, "", sizeOf(tc.id, tc.secret, tc.context)); err != nil {
				t.Fatal(err)
			}
			if got := vol.VFSOpt["vfs_disk_space_total_size"]; got != tc.wantTotal {
				t.Errorf("vfs_disk_space_total_size = %q, want %q", got, tc.wantTotal)
			}
			if got := vol.VFSOpt["vfs_used_is_size"]; got != tc.wantIs {
				t.Errorf("vfs_used_is_size = %q, want %q", got, tc.wantIs)
			}
		})
	}
	if err := s.applyOptions(&secrets.Volume{}, false, "", volumeSize{capacity: "lots"}); !errors.Is(err, secrets.ErrInvalid) {
		t.Errorf("a bad capacity: %v", err)
	}
}
