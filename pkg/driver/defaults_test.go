package driver

import (
	"encoding/json"
	"testing"

	"github.com/csi-rclone/csi-rclone/secrets"
)

// The defaults lie under the tenant's options, and a tenant may set each
// of them to its own value.
func TestApplyOptionsDefaults(t *testing.T) {
	s := &nodeServer{d: &Driver{opts: Options{DefaultUID: 1000, DefaultGID: 1001}}}
	for _, tc := range []struct {
		name           string
		vfs, mnt       map[string]string
		wantVFS        map[string]string
		wantMnt        map[string]string
		readOnly       bool
		wantReadOnly   string
		wantAllowOther string
	}{
		{name: "defaults", wantVFS: DefaultVFSOptions, wantMnt: DefaultMountOptions},
		{name: "the tenant's values win",
			vfs:     map[string]string{"vfs_read_chunk_streams": "2", "vfs_read_chunk_size": "64M"},
			mnt:     map[string]string{"max_read_ahead": "128k"},
			wantVFS: map[string]string{"vfs_read_chunk_streams": "2", "vfs_read_chunk_size": "64M", "uid": "1000", "gid": "1001"},
			wantMnt: map[string]string{"max_read_ahead": "128k", "allow_other": "true"}},
		{name: "read-only access wins over the tenant", vfs: map[string]string{"read_only": "false"}, readOnly: true,
			wantVFS: map[string]string{"read_only": "true"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vol := &secrets.Volume{VFSOpt: tc.vfs, MountOpt: tc.mnt}
			if err := s.applyOptions(vol, tc.readOnly, "", volumeSize{}); err != nil {
				t.Fatal(err)
			}
			for k, want := range tc.wantVFS {
				if got := vol.VFSOpt[k]; got != want {
					t.Errorf("vfsOpt %s = %q, want %q", k, got, want)
				}
			}
			for k, want := range tc.wantMnt {
				if got := vol.MountOpt[k]; got != want {
					t.Errorf("mountOpt %s = %q, want %q", k, got, want)
				}
			}
		})
	}
	// The defaults do not leak into each other's volumes.
	vol := &secrets.Volume{}
	if err := s.applyOptions(vol, false, "", volumeSize{}); err != nil {
		t.Fatal(err)
	}
	vol.VFSOpt["vfs_read_chunk_streams"], vol.MountOpt["max_read_ahead"] = "1", "0"
	if DefaultVFSOptions["vfs_read_chunk_streams"] == "1" || DefaultMountOptions["max_read_ahead"] == "0" {
		t.Error("applyOptions handed out the defaults' own maps")
	}
}

// Each default is one a tenant could write under the default operator
// limits (secrets.Limits): the driver asks no more of a node than it lets
// a tenant ask.
func TestDefaultsWithinLimits(t *testing.T) {
	vfs, err := json.Marshal(DefaultVFSOptions)
	if err != nil {
		t.Fatal(err)
	}
	mnt, err := json.Marshal(DefaultMountOptions)
	if err != nil {
		t.Fatal(err)
	}
	secret := map[string]string{
		"remote": "store", "remotePath": "bucket",
		"configData": "[store]\ntype = s3\nprovider = Other\nendpoint = http://192.0.2.1:9000\n",
		"vfsOpt":     string(vfs), "mountOpt": string(mnt),
	}
	if _, err := secrets.Parse(secret, nil, &secrets.Policy{}); err != nil {
		t.Fatalf("the defaults as a tenant's options: %v", err)
	}
}

// An operator who lowers a limit below a default lowers the default with
// it; a tenant's own value is checked (and refused above a limit) by the
// policy, not here.
func TestDefaultsFitTheOperatorsLimits(t *testing.T) {
	for _, tc := range []struct {
		name   string
		limits secrets.Limits
		vfs    map[string]string
		want   map[string]string
	}{
		{"default limits keep the defaults", secrets.Limits{},
			nil, map[string]string{"vfs_read_chunk_streams": DefaultVFSOptions["vfs_read_chunk_streams"], "vfs_read_chunk_size": DefaultVFSOptions["vfs_read_chunk_size"], "max_read_ahead": DefaultMountOptions["max_read_ahead"]}},
		{"lower limits lower them", secrets.Limits{Streams: 2, ChunkSize: 4 << 20, ReadAhead: 1 << 20},
			nil, map[string]string{"vfs_read_chunk_streams": "2", "vfs_read_chunk_size": "4194304B", "max_read_ahead": "1048576B"}},
		{"no limit keeps them", secrets.Limits{Streams: -1, ChunkSize: -1, ReadAhead: -1},
			nil, map[string]string{"vfs_read_chunk_streams": DefaultVFSOptions["vfs_read_chunk_streams"], "max_read_ahead": DefaultMountOptions["max_read_ahead"]}},
		{"the tenant's value stands", secrets.Limits{Streams: 2},
			map[string]string{"vfs_read_chunk_streams": "1"}, map[string]string{"vfs_read_chunk_streams": "1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &nodeServer{d: &Driver{opts: Options{Policy: secrets.Policy{Limits: tc.limits}}}}
			vol := &secrets.Volume{VFSOpt: tc.vfs}
			if err := s.applyOptions(vol, false, "", volumeSize{}); err != nil {
				t.Fatal(err)
			}
			for k, want := range tc.want {
				got := vol.VFSOpt[k]
				if k == "max_read_ahead" {
					got = vol.MountOpt[k]
				}
				if got != want {
					t.Errorf("%s = %q, want %q", k, got, want)
				}
			}
		})
	}
}
