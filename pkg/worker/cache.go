package worker

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/rclone/rclone/lib/ranges"
	"github.com/rclone/rclone/vfs/vfscache"
)

// repairCacheMetadata saves files that a killed worker left with cut-short
// cache metadata. rclone rewrites an item's metadata file in place (truncate,
// then write) when a file is closed; a worker killed in between leaves it
// empty, and the next rclone deletes the cached file as corrupt: data lost
// that was never uploaded. Each such file is marked whole and dirty instead,
// so that the next mount uploads it. It returns how many it marked.
func repairCacheMetadata(cacheDir string, now time.Time) (int, error) {
	metaRoot := filepath.Join(cacheDir, "vfsMeta")
	dataRoot := filepath.Join(cacheDir, "vfs")
	repaired := 0
	err := filepath.WalkDir(metaRoot, func(metaPath string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		raw, err := os.ReadFile(metaPath)
		if err != nil {
			return err
		}
		var info vfscache.Info
		if json.Unmarshal(raw, &info) == nil {
			return nil
		}
		rel, err := filepath.Rel(metaRoot, metaPath)
		if err != nil {
			return err
		}
		data, err := os.Stat(filepath.Join(dataRoot, rel))
		if err != nil || !data.Mode().IsRegular() {
			return nil // nothing to save; rclone drops the metadata
		}
		info = vfscache.Info{
			ModTime: data.ModTime(),
			ATime:   now,
			Size:    data.Size(),
			Rs:      ranges.Ranges{{Pos: 0, Size: data.Size()}},
			Dirty:   true,
		}
		fixed, err := json.Marshal(&info)
		if err != nil {
			return err
		}
		tmp := metaPath + ".csi-rclone-tmp"
		if err := os.WriteFile(tmp, fixed, 0o600); err != nil {
			return err
		}
		if err := os.Rename(tmp, metaPath); err != nil {
			return err
		}
		repaired++
		return nil
	})
	return repaired, err
}
