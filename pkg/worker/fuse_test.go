package worker

import (
	"errors"
	"testing"

	"github.com/csi-rclone/csi-rclone/secrets"
)

// The driver gives the kernel what rclone's mount2 would have given
// fusermount3 for the same options.
func TestKernelMountOf(t *testing.T) {
	for _, tc := range []struct {
		name     string
		mountOpt map[string]string
		vfsOpt   map[string]string
		want     kernelMount
		wantErr  error
	}{
		{name: "defaults", want: kernelMount{source: "store:bucket/dir"}},
		{name: "allow_other", mountOpt: map[string]string{"allow_other": "true"}, want: kernelMount{source: "store:bucket/dir", allowOther: true}},
		{name: "allow_root is allow_other to the kernel", mountOpt: map[string]string{"allow_root": "true"}, want: kernelMount{source: "store:bucket/dir", allowOther: true}},
		{name: "default_permissions", mountOpt: map[string]string{"default_permissions": "true"}, want: kernelMount{source: "store:bucket/dir", defaultPermissions: true}},
		{name: "allow_idmap adds default_permissions", mountOpt: map[string]string{"allow_idmap": "true"}, want: kernelMount{source: "store:bucket/dir", defaultPermissions: true}},
		{name: "devname", mountOpt: map[string]string{"devname": "mine"}, want: kernelMount{source: "mine"}},
		{name: "read only", vfsOpt: map[string]string{"read_only": "true"}, want: kernelMount{source: "store:bucket/dir", readOnly: true}},
		{name: "max_read_ahead", mountOpt: map[string]string{"max_read_ahead": "1M"}, want: kernelMount{source: "store:bucket/dir", readAhead: 1 << 20}},
		{name: "bad value", mountOpt: map[string]string{"allow_other": "maybe"}, wantErr: ErrInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vol := &secrets.Volume{Remote: "store", Path: "bucket/dir", MountOpt: tc.mountOpt, VFSOpt: tc.vfsOpt}
			got, err := kernelMountOf(vol, 2000000000, 2000000000)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("error %v, want %v", err, tc.wantErr)
				}
				return
			}
			tc.want.uid, tc.want.gid = 2000000000, 2000000000
			if err != nil || got != tc.want {
				t.Fatalf("got %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

func TestIsInheritedFUSE(t *testing.T) {
	for in, want := range map[string]bool{fuseMountPoint: true, "/dev/fd/7": true, "/run/csi-rclone/mnt/x/mnt": false, "/dev/fuse": false} {
		if got := isInheritedFUSE(in); got != want {
			t.Errorf("isInheritedFUSE(%q) = %v", in, got)
		}
	}
}
