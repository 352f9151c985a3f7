package driver_test

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"golang.org/x/sys/unix"

	"github.com/csi-rclone/csi-rclone/pkg/driver"
	"github.com/csi-rclone/csi-rclone/test/harness"
)

// freeAddr is a loopback address with a port free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// volumeSeries scrapes /metrics and returns the per-volume series of one
// volume by name, with their pvc labels.
func volumeSeries(addr, volumeID string) (map[string]float64, map[string]string, error) {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		return nil, nil, fmt.Errorf("%s: %s", resp.Status, body)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, nil, err
	}
	values, labels := map[string]float64{}, map[string]string{}
	for name, f := range families {
		for _, m := range f.GetMetric() {
			var mine bool
			for _, l := range m.GetLabel() {
				if l.GetName() == "volume_id" && l.GetValue() == volumeID {
					mine = true
				}
			}
			if !mine {
				continue
			}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			switch {
			case m.GetCounter() != nil:
				values[name] = m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				values[name] = m.GetGauge().GetValue()
			}
		}
	}
	return values, labels, nil
}

// The per-volume series of /metrics move with what a pod does on a real
// mount, carry the PVC's name, and go when the volume is unstaged.
func TestVolumeMetricsMove(t *testing.T) {
	if why := harness.Supported(); why != "" {
		t.Skip(why)
	}
	addr := freeAddr(t)
	e, err := harness.Start(t.Context(), t.TempDir(), func(o *driver.Options) { o.MetricsAddress = addr })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	if err := e.S3.MakeBucket("metrics"); err != nil {
		t.Fatal(err)
	}
	seed := bytes.Repeat([]byte("r"), 256<<10)
	if err := os.WriteFile(e.S3.Object("metrics", "seed.bin"), seed, 0o644); err != nil {
		t.Fatal(err)
	}
	v := newVol(t, e, "vol-metrics", "metrics")
	v.context = map[string]string{"csi.storage.k8s.io/pvc/namespace": "team-a", "csi.storage.k8s.io/pvc/name": "data"}
	v.secret["vfsOpt"] = `{"vfs_write_back":"100ms"}`
	v.mustStage()
	target := v.mustPublish("pod", false)

	var before map[string]float64
	eventually(t, "the volume's series", func() error {
		vals, labels, err := volumeSeries(addr, v.id)
		if err != nil {
			return err
		}
		if vals["csi_rclone_volume_up"] != 1 {
			return fmt.Errorf("up = %v in %v", vals["csi_rclone_volume_up"], vals)
		}
		if labels["pvc_namespace"] != "team-a" || labels["pvc_name"] != "data" {
			return fmt.Errorf("labels %v", labels)
		}
		before = vals
		return nil
	})

	// Scrapes at once (two Prometheus replicas) share the worker's answer.
	errs := make(chan error, 4)
	for range 4 {
		go func() {
			vals, _, err := volumeSeries(addr, v.id)
			if err == nil && vals["csi_rclone_volume_up"] != 1 {
				err = fmt.Errorf("up = %v", vals["csi_rclone_volume_up"])
			}
			errs <- err
		}()
	}
	for range 4 {
		if err := <-errs; err != nil {
			t.Errorf("concurrent scrape: %v", err)
		}
	}

	got, err := os.ReadFile(filepath.Join(target, "seed.bin"))
	if err != nil || !bytes.Equal(got, seed) {
		t.Fatalf("read %d bytes, %v", len(got), err)
	}
	written := bytes.Repeat([]byte("w"), 128<<10)
	if err := os.WriteFile(filepath.Join(target, "out.bin"), written, 0o644); err != nil {
		t.Fatal(err)
	}
	eventuallyWithin(t, 30*time.Second, "the series after a read and a write", func() error {
		vals, _, err := volumeSeries(addr, v.id)
		if err != nil {
			return err
		}
		if r := vals["csi_rclone_volume_read_bytes_total"] - before["csi_rclone_volume_read_bytes_total"]; r < float64(len(seed)) {
			return fmt.Errorf("read_bytes_total grew by %v, want >= %d", r, len(seed))
		}
		if w := vals["csi_rclone_volume_written_bytes_total"] - before["csi_rclone_volume_written_bytes_total"]; w < float64(len(written)) {
			return fmt.Errorf("written_bytes_total grew by %v, want >= %d", w, len(written))
		}
		if vals["csi_rclone_volume_cache_bytes"] <= 0 || vals["csi_rclone_volume_cache_files"] < 1 {
			return fmt.Errorf("cache %v bytes, %v files", vals["csi_rclone_volume_cache_bytes"], vals["csi_rclone_volume_cache_files"])
		}
		if vals["csi_rclone_volume_dirty_files"] != 0 {
			return fmt.Errorf("dirty_files %v after the upload", vals["csi_rclone_volume_dirty_files"])
		}
		return nil
	})

	// Files a pod holds open are counted until their last close; a second
	// descriptor of the same open (dup) is no second file.
	openFiles := func(want float64) {
		t.Helper()
		eventually(t, fmt.Sprintf("open_files %v", want), func() error {
			vals, _, err := volumeSeries(addr, v.id)
			if err != nil {
				return err
			}
			if got := vals["csi_rclone_volume_open_files"]; got != want {
				return fmt.Errorf("open_files = %v", got)
			}
			return nil
		})
	}
	openFiles(0)
	r, err := os.Open(filepath.Join(target, "seed.bin"))
	if err != nil {
		t.Fatal(err)
	}
	w, err := os.Create(filepath.Join(target, "held.bin"))
	if err != nil {
		t.Fatal(err)
	}
	dup, err := unix.Dup(int(r.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	openFiles(2)
	r.Close()
	w.Close()
	openFiles(1) // the dup holds the first open
	unix.Close(dup)
	openFiles(0)

	// A worker that dies counts a restart and a recovery, and the bytes
	// counted so far stay.
	vals, _, _ := volumeSeries(addr, v.id)
	killWorkers(t, e, v.id)
	eventuallyWithin(t, 30*time.Second, "the series after the worker died", func() error {
		now, _, err := volumeSeries(addr, v.id)
		if err != nil {
			return err
		}
		if now["csi_rclone_volume_up"] != 1 || now["csi_rclone_volume_worker_restarts_total"] != 1 || now["csi_rclone_volume_remounts_total"] != 1 {
			return fmt.Errorf("up %v, restarts %v, recoveries %v", now["csi_rclone_volume_up"], now["csi_rclone_volume_worker_restarts_total"], now["csi_rclone_volume_remounts_total"])
		}
		if now["csi_rclone_volume_read_bytes_total"] < vals["csi_rclone_volume_read_bytes_total"] {
			return fmt.Errorf("read_bytes_total went back from %v to %v", vals["csi_rclone_volume_read_bytes_total"], now["csi_rclone_volume_read_bytes_total"])
		}
		return nil
	})

	if err := v.unpublish(target); err != nil {
		t.Fatal(err)
	}
	if err := v.unstage(); err != nil {
		t.Fatal(err)
	}
	if vals, _, err := volumeSeries(addr, v.id); err != nil || len(vals) != 0 {
		t.Fatalf("series after unstage: %v, %v", vals, err)
	}
}
