package driver_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"

	"github.com/csi-rclone/csi-rclone/test/harness"
)

const provBucket = "pvcs"

// provisionerSecret is a provisioner secret for the loopback S3 server. S3
// has no directories: directory markers make an empty one visible.
func provisionerSecret(e *harness.Env) map[string]string {
	return map[string]string{
		"remote":     harness.RemoteName,
		"configData": e.S3.RcloneConfig(harness.RemoteName) + "directory_markers = true\n",
	}
}

func createDirVolume(e *harness.Env, name, onDelete, pvcNamespace, pvcName string, secret map[string]string) (*csi.Volume, error) {
	params := map[string]string{
		"remotePath":                       provBucket + "/team",
		"subdirTemplate":                   "${pvc.namespace}/${pvc.name}",
		"csi.storage.k8s.io/pvc/name":      pvcName,
		"csi.storage.k8s.io/pvc/namespace": pvcNamespace,
		"csi.storage.k8s.io/pv/name":       name,
	}
	if onDelete != "" {
		params["onDelete"] = onDelete
	}
	r, err := e.Controller.CreateVolume(context.Background(), &csi.CreateVolumeRequest{
		Name:               name,
		CapacityRange:      &csi.CapacityRange{RequiredBytes: 3 << 30},
		VolumeCapabilities: []*csi.VolumeCapability{harness.MountCapability(rwo)},
		Parameters:         params,
		Secrets:            secret,
	})
	return r.GetVolume(), err
}

func deleteVolume(e *harness.Env, id string, secret map[string]string) error {
	_, err := e.Controller.DeleteVolume(context.Background(), &csi.DeleteVolumeRequest{VolumeId: id, Secrets: secret})
	return err
}

func isDir(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.IsDir()
}

// TestDirectoryPerVolume makes a directory per PVC in a real bucket, mounts
// it, shows the PVC's size in statfs, and deletes it from another
// controller instance, which knows the volume only by its id.
func TestDirectoryPerVolume(t *testing.T) {
	e := startEnv(t)
	if err := e.S3.MakeBucket(provBucket); err != nil {
		t.Fatal(err)
	}
	secret := provisionerSecret(e)
	dir := e.S3.Object(provBucket, "team/alice/data")

	v, err := createDirVolume(e, "pvc-1", "delete", "alice", "data", secret)
	if err != nil {
		t.Fatal(err)
	}
	if !isDir(dir) {
		t.Fatalf("CreateVolume made no directory %s", dir)
	}
	if got := v.GetVolumeContext()["remotePathSuffix"]; got != "alice/data" {
		t.Errorf("volume context remotePathSuffix = %q, want alice/data", got)
	}
	if _, ok := v.GetVolumeContext()["subdirTemplate"]; ok {
		t.Error("volume context keeps subdirTemplate")
	}
	again, err := createDirVolume(e, "pvc-1", "delete", "alice", "data", secret)
	if err != nil || again.GetVolumeId() != v.GetVolumeId() {
		t.Fatalf("CreateVolume again: %v, id %q; want %q", err, again.GetVolumeId(), v.GetVolumeId())
	}

	// The node mounts the directory, not the base, and shows the PVC's size,
	// less what the directory holds.
	const seed = 1 << 20
	if err := os.WriteFile(filepath.Join(dir, "seed"), make([]byte, seed), 0o644); err != nil {
		t.Fatal(err)
	}
	vol := newVol(t, e, v.GetVolumeId(), provBucket+"/team")
	vol.context = v.GetVolumeContext()
	vol.mustStage()
	target := vol.mustPublish("pod", false)
	if err := os.WriteFile(filepath.Join(target, "hello"), []byte("hi"), 0o644); err != nil {
		t.Fatal(err)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(target, &st); err != nil {
		t.Fatal(err)
	}
	if total := int64(st.Blocks) * int64(st.Bsize); total != 3<<30 {
		t.Errorf("statfs total = %d bytes, want the capacity %d", total, int64(3<<30))
	}
	if free := int64(st.Bavail) * int64(st.Bsize); free != 3<<30-seed {
		t.Errorf("statfs free = %d bytes, want the capacity less the directory's %d bytes", free, seed)
	}
	stats, err := e.Node.NodeGetVolumeStats(context.Background(), &csi.NodeGetVolumeStatsRequest{VolumeId: vol.id, VolumePath: target})
	if err != nil {
		t.Fatal(err)
	}
	if u := stats.GetUsage()[0]; u.GetTotal() != 3<<30 || u.GetUsed() != seed {
		t.Errorf("NodeGetVolumeStats total %d used %d, want %d and %d", u.GetTotal(), u.GetUsed(), int64(3<<30), seed)
	}
	if err := vol.unpublish(target); err != nil {
		t.Fatal(err)
	}
	if err := vol.unstage(); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the file in the volume's directory", func() error {
		if _, err := os.Stat(filepath.Join(dir, "hello")); err != nil {
			var all []string
			_ = filepath.Walk(e.S3.Dir, func(p string, _ os.FileInfo, _ error) error { all = append(all, p); return nil })
			return fmt.Errorf("%w; s3 holds %v", err, all)
		}
		return nil
	})

	// A new controller, with no memory of the volume, deletes it; twice.
	// The rest of the base stays.
	sibling := e.S3.Object(provBucket, "team/alice/other")
	if err := os.WriteFile(sibling, []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	other := startEnv(t)
	for i := 0; i < 2; i++ {
		if err := deleteVolume(other, v.GetVolumeId(), secret); err != nil {
			t.Fatalf("DeleteVolume #%d: %v", i+1, err)
		}
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("directory left after delete: %v", err)
	}
	if _, err := os.Stat(sibling); err != nil {
		t.Errorf("deleting the volume's directory took a sibling: %v", err)
	}
}

func TestDirectoryOnDelete(t *testing.T) {
	e := startEnv(t)
	if err := e.S3.MakeBucket(provBucket); err != nil {
		t.Fatal(err)
	}
	secret := provisionerSecret(e)
	ns := e.S3.Object(provBucket, "team/bob")
	for _, tc := range []struct{ onDelete, name string }{{"", "kept"}, {"retain", "kept2"}, {"archive", "old"}} {
		v, err := createDirVolume(e, "pvc-"+tc.name, tc.onDelete, "bob", tc.name, secret)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(ns, tc.name, "f"), []byte("data"), 0o644); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 2; i++ {
			if err := deleteVolume(e, v.GetVolumeId(), secret); err != nil {
				t.Fatalf("%s: DeleteVolume #%d: %v", tc.name, i+1, err)
			}
		}
	}
	for _, kept := range []string{"kept", "kept2"} {
		if _, err := os.Stat(filepath.Join(ns, kept, "f")); err != nil {
			t.Errorf("retain lost the data: %v", err)
		}
	}
	if _, err := os.Stat(filepath.Join(ns, "old")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("archive left the directory: %v", err)
	}
	archived, _ := filepath.Glob(filepath.Join(ns, "old.archived-*", "f"))
	if len(archived) != 1 {
		entries, _ := os.ReadDir(ns)
		t.Errorf("archived copies of the data: %v; directory holds %v", archived, entries)
	}
}

func TestDirectoryRefusals(t *testing.T) {
	e := startEnv(t)
	if err := e.S3.MakeBucket(provBucket); err != nil {
		t.Fatal(err)
	}
	secret := provisionerSecret(e)
	create := func(params map[string]string, secret map[string]string) error {
		_, err := e.Controller.CreateVolume(context.Background(), &csi.CreateVolumeRequest{
			Name:               "pvc-bad",
			VolumeCapabilities: []*csi.VolumeCapability{harness.MountCapability(rwo)},
			Parameters:         params,
			Secrets:            secret,
		})
		return err
	}
	md := func(kv ...string) map[string]string {
		m := map[string]string{"remotePath": provBucket, "csi.storage.k8s.io/pvc/name": "x", "csi.storage.k8s.io/pvc/namespace": "ns"}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	for name, tc := range map[string]struct {
		params, secret map[string]string
	}{
		"dot-dot":          {md("subdirTemplate", "../${pvc.name}"), secret},
		"absolute":         {md("subdirTemplate", "/${pvc.name}"), secret},
		"unknown variable": {md("subdirTemplate", "${pvc.uid}"), secret},
		"empty":            {md("subdirTemplate", ""), secret},
		"no metadata":      {map[string]string{"remotePath": provBucket, "subdirTemplate": "${pvc.name}"}, secret},
		"bad onDelete":     {md("subdirTemplate", "${pvc.name}", "onDelete", "shred"), secret},
		"no secret":        {md("subdirTemplate", "${pvc.name}"), nil},
		"local backend":    {md("subdirTemplate", "${pvc.name}"), map[string]string{"remote": "store", "configData": "[store]\ntype = local\n"}},
		"suffix in secret": {md("subdirTemplate", "${pvc.name}"), map[string]string{"remote": "store", "remotePathSuffix": "x", "configData": secret["configData"]}},
	} {
		t.Run(name, func(t *testing.T) {
			wantCode(t, create(tc.params, tc.secret), codes.InvalidArgument)
		})
	}
	entries, _ := os.ReadDir(e.S3.Object(provBucket, ""))
	if len(entries) != 0 {
		t.Errorf("a refused CreateVolume made %v", entries)
	}
	// A bad key fails the PVC with the storage's reason, not a generic error.
	bad := map[string]string{"remote": "store", "configData": strings.Replace(secret["configData"], harness.SecretAccessKey, "wrong", 1)}
	err := create(md("subdirTemplate", "${pvc.name}"), bad)
	wantCode(t, err, codes.PermissionDenied)
	if strings.Contains(fmt.Sprint(err), harness.SecretAccessKey) {
		t.Errorf("error quotes the key: %v", err)
	}
}

// A static volume with a capacity attribute shows it as its size.
func TestCapacityInStatfs(t *testing.T) {
	e := startEnv(t)
	if err := e.S3.MakeBucket("sized"); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, capacity string
		want           int64
	}{{"bytes", "5368709120", 5 << 30}, {"size syntax", "20Gi", 20 << 30}} {
		t.Run(tc.name, func(t *testing.T) {
			v := newVol(t, e, "vol-sized-"+strings.ReplaceAll(tc.name, " ", "-"), "sized")
			v.context = map[string]string{"capacity": tc.capacity}
			v.mustStage()
			target := v.mustPublish("pod-"+v.id, false)
			var st unix.Statfs_t
			if err := unix.Statfs(target, &st); err != nil {
				t.Fatal(err)
			}
			if total := int64(st.Blocks) * int64(st.Bsize); total != tc.want {
				t.Errorf("statfs total = %d, want %d", total, tc.want)
			}
		})
	}
	v := newVol(t, e, "vol-sized-bad", "sized")
	v.context = map[string]string{"capacity": "lots"}
	wantCode(t, v.stage(), codes.InvalidArgument)
}

// S3 cannot say its free space (no About): a sized volume of a whole bucket
// path shows as free what its VFS cache can still take, in statfs and in
// NodeGetVolumeStats alike: less while the cache holds a file not uploaded.
func TestFreeSpaceIsTheCacheLimit(t *testing.T) {
	e := startEnv(t)
	if err := e.S3.MakeBucket("cachefree"); err != nil {
		t.Fatal(err)
	}
	const limit = 64 << 20
	v := newVol(t, e, "vol-cache-free", "cachefree")
	v.context = map[string]string{"capacity": "20Gi"}
	v.secret["vfsOpt"] = `{"vfs_cache_max_size":"64M","vfs_cache_poll_interval":"1s"}`
	v.mustStage()
	target := v.mustPublish("pod", false)

	free := func() (total, free int64) {
		t.Helper()
		var st unix.Statfs_t
		if err := unix.Statfs(target, &st); err != nil {
			t.Fatal(err)
		}
		return int64(st.Blocks) * st.Bsize, int64(st.Bavail) * st.Bsize
	}
	if total, f := free(); total != 20<<30 || f != limit {
		t.Fatalf("statfs total %d, free %d; want %d and the cache limit %d", total, f, int64(20<<30), limit)
	}
	stats, err := e.Node.NodeGetVolumeStats(context.Background(), &csi.NodeGetVolumeStatsRequest{VolumeId: v.id, VolumePath: target})
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range stats.GetUsage() {
		if u.GetUnit() == csi.VolumeUsage_BYTES && (u.GetTotal() != 20<<30 || u.GetAvailable() != limit) {
			t.Errorf("NodeGetVolumeStats total %d, available %d; want %d, %d", u.GetTotal(), u.GetAvailable(), int64(20<<30), limit)
		}
	}

	// A file written and not yet uploaded cannot be evicted: it takes room.
	// Once uploaded it could be, and the room is back.
	const written = 16 << 20
	f, err := os.Create(filepath.Join(target, "in-cache.bin"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(bytes.Repeat([]byte("c"), written)); err != nil {
		t.Fatal(err)
	}
	eventuallyWithin(t, 30*time.Second, "free space to shrink by the file not uploaded", func() error {
		if _, f := free(); f > limit-written || f <= 0 {
			return fmt.Errorf("free %d, want <= %d and > 0", f, limit-written)
		}
		return nil
	})
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	eventuallyWithin(t, 30*time.Second, "the room back once the file is uploaded", func() error {
		if _, f := free(); f != limit {
			return fmt.Errorf("free %d, want %d", f, limit)
		}
		return nil
	})
}

// S3 has no empty directories: a PVC's fresh directory is staged all the
// same, without directory markers in the config.
func TestDirectoryStagesEmpty(t *testing.T) {
	e := startEnv(t)
	if err := e.S3.MakeBucket(provBucket); err != nil {
		t.Fatal(err)
	}
	secret := map[string]string{"remote": harness.RemoteName, "configData": e.S3.RcloneConfig(harness.RemoteName)}
	v, err := createDirVolume(e, "pvc-empty", "delete", "carol", "fresh", secret)
	if err != nil {
		t.Fatal(err)
	}
	vol := newVol(t, e, v.GetVolumeId(), provBucket+"/team")
	vol.context = v.GetVolumeContext()
	vol.mustStage()
	target := vol.mustPublish("pod", false)
	if err := os.WriteFile(filepath.Join(target, "first"), []byte("1"), 0o644); err != nil {
		t.Fatal(err)
	}
}
