package worker

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/rclone/rclone/vfs/vfscache"
)

func TestRepairCacheMetadata(t *testing.T) {
	dir := t.TempDir()
	write := func(rel, content string) {
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	good := `{"ModTime":"2026-01-01T00:00:00Z","ATime":"2026-01-01T00:00:00Z","Size":4,"Rs":[{"Pos":0,"Size":4}],"Fingerprint":"x","Dirty":false}`
	write("vfs/store/bucket/cut.txt", "precious")
	write("vfsMeta/store/bucket/cut.txt", "") // the worker died mid-rewrite
	write("vfs/store/bucket/fine.txt", "fine")
	write("vfsMeta/store/bucket/fine.txt", good)
	write("vfsMeta/store/bucket/orphan.txt", "{") // no data: nothing to save

	n, err := repairCacheMetadata(dir, time.Now())
	if err != nil || n != 1 {
		t.Fatalf("repaired %d, %v; want 1", n, err)
	}
	var info vfscache.Info
	raw, _ := os.ReadFile(filepath.Join(dir, "vfsMeta/store/bucket/cut.txt"))
	if err := json.Unmarshal(raw, &info); err != nil {
		t.Fatal(err)
	}
	if !info.Dirty || info.Size != 8 || len(info.Rs) != 1 || info.Rs[0].Size != 8 {
		t.Fatalf("repaired metadata %+v", info)
	}
	if raw, _ := os.ReadFile(filepath.Join(dir, "vfsMeta/store/bucket/fine.txt")); string(raw) != good {
		t.Fatal("good metadata changed")
	}
	if n, err := repairCacheMetadata(filepath.Join(dir, "missing"), time.Now()); n != 0 || err != nil {
		t.Fatalf("missing cache dir: %d %v", n, err)
	}
}
