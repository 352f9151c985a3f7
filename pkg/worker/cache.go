package worker

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/rclone/rclone/lib/ranges"
	"github.com/rclone/rclone/vfs/vfscache"
)

// A volume's VFS cache dir holds, per file, the data under vfs/ and rclone's
// metadata (vfscache.Info) under vfsMeta/, at the same relative path.
const (
	cacheData = "vfs"
	cacheMeta = "vfsMeta"
)

// cacheEntry is one file of a VFS cache dir as found on disk.
type cacheEntry struct {
	metaPath, dataPath string
	info               vfscache.Info
	parsed             bool        // the metadata is whole
	data               os.FileInfo // nil when there is no data file
}

// walkCache calls fn for every metadata file below cacheDir.
func walkCache(cacheDir string, fn func(e *cacheEntry) error) error {
	metaRoot := filepath.Join(cacheDir, cacheMeta)
	dataRoot := filepath.Join(cacheDir, cacheData)
	return filepath.WalkDir(metaRoot, func(metaPath string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		rel, err := filepath.Rel(metaRoot, metaPath)
		if err != nil {
			return err
		}
		e := &cacheEntry{metaPath: metaPath, dataPath: filepath.Join(dataRoot, rel)}
		raw, err := os.ReadFile(metaPath)
		if err != nil {
			return err
		}
		e.parsed = json.Unmarshal(raw, &e.info) == nil
		if fi, err := os.Stat(e.dataPath); err == nil && fi.Mode().IsRegular() {
			e.data = fi
		}
		return fn(e)
	})
}

// notUploaded says whether the entry holds data that the remote lacks:
// dirty, or with metadata cut short (which repairCacheMetadata marks dirty).
func (e *cacheEntry) notUploaded() bool {
	return e.data != nil && (!e.parsed || e.info.Dirty)
}

// diskBytes is what the entry's data file takes on disk: cache files are
// sparse, holding what was read or written.
func (e *cacheEntry) diskBytes() int64 {
	if e.data == nil {
		return 0
	}
	if sys, ok := e.data.Sys().(*syscall.Stat_t); ok {
		return sys.Blocks * 512
	}
	return e.data.Size()
}

// notUploadedBytes is what the files of a cache dir not uploaded yet take
// on disk: what rclone cannot evict to make room.
func notUploadedBytes(cacheDir string) (int64, error) {
	var n int64
	err := walkCache(cacheDir, func(e *cacheEntry) error {
		if e.notUploaded() {
			n += e.diskBytes()
		}
		return nil
	})
	return n, err
}

// repairCacheMetadata makes a cache dir that a killed worker left safe to
// mount, before rclone reads it. It returns how many files it marked for
// upload.
//
//   - A file whose metadata was cut short is marked whole and dirty, so that
//     it is uploaded. rclone rewrites an item's metadata in place (truncate,
//     then write) when a file is closed; a worker killed in between leaves
//     it empty, and rclone would delete the cached file as corrupt: data lost
//     that was never uploaded.
//   - A clean file (already uploaded) is dropped: it is only a copy of the
//     remote, and after a crash a copy cut short cannot be told from a whole
//     one. rclone trusts a clean item's data file for the file's size
//     (vfscache Item._checkObject keeps the cached fingerprint and then sizes
//     the item from the data file), so a short copy would read back short or
//     empty, in this worker and every later one. Dropped, it is read from the
//     remote again.
func repairCacheMetadata(cacheDir string, now time.Time) (int, error) {
	repaired := 0
	err := walkCache(cacheDir, func(e *cacheEntry) error {
		switch {
		case e.data == nil:
			return nil // nothing to save; rclone drops the metadata
		case e.parsed && !e.info.Dirty:
			if err := os.Remove(e.dataPath); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
			if err := os.Remove(e.metaPath); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
			return nil
		case e.parsed:
			return nil // dirty: rclone uploads it on mount
		}
		info := vfscache.Info{
			ModTime: e.data.ModTime(),
			ATime:   now,
			Size:    e.data.Size(),
			Rs:      ranges.Ranges{{Pos: 0, Size: e.data.Size()}},
			Dirty:   true,
		}
		fixed, err := json.Marshal(&info)
		if err != nil {
			return err
		}
		tmp := e.metaPath + ".csi-rclone-tmp"
		if err := os.WriteFile(tmp, fixed, 0o600); err != nil {
			return err
		}
		if err := os.Rename(tmp, e.metaPath); err != nil {
			return err
		}
		repaired++
		return nil
	})
	return repaired, err
}

// NotUploaded counts the files in a volume's cache dir that are not on the
// remote yet: while there are any, the cache dir must stay for the next
// mount of the volume to upload them. A missing cache dir holds none.
func NotUploaded(cacheDir string) (int, error) {
	n := 0
	err := walkCache(cacheDir, func(e *cacheEntry) error {
		if e.notUploaded() {
			n++
		}
		return nil
	})
	return n, err
}
