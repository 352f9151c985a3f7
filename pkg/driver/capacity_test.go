package driver

import (
	"errors"
	"testing"

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
	for _, tc := range []struct {
		name, capacity, tenant, want string
	}{
		{"from CreateVolume", "3221225472", "", "3221225472B"},
		{"size syntax", "2Gi", "", "2147483648B"},
		{"the tenant's own value wins", "2Gi", "5G", "5G"},
		{"unknown", "", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vol := &secrets.Volume{VFSOpt: map[string]string{}}
			if tc.tenant != "" {
				vol.VFSOpt["vfs_disk_space_total_size"] = tc.tenant
			}
			if err := s.applyOptions(vol, false, "", tc.capacity); err != nil {
				t.Fatal(err)
			}
			if got := vol.VFSOpt["vfs_disk_space_total_size"]; got != tc.want {
				t.Errorf("vfs_disk_space_total_size = %q, want %q", got, tc.want)
			}
		})
	}
	if err := s.applyOptions(&secrets.Volume{}, false, "", "lots"); !errors.Is(err, secrets.ErrInvalid) {
		t.Errorf("a bad capacity: %v", err)
	}
}
