package driver

import (
	"context"
	"errors"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/csi-rclone/csi-rclone/pkg/state"
	"github.com/csi-rclone/csi-rclone/pkg/worker"
)

func newStatsFake(st worker.Stats, err error) *statsFake {
	return &statsFake{fakeWorker: fakeWorker{done: make(chan struct{})}, stats: st, err: err}
}

// statsFake is a fake worker that answers "stats".
type statsFake struct {
	fakeWorker
	stats worker.Stats
	err   error
}

func (w *statsFake) Stats(ctx context.Context) (worker.Stats, error) {
	if w.err != nil {
		return worker.Stats{}, w.err
	}
	return w.stats, nil
}

// scrape gathers c and returns each series' value by name and volume id.
func scrape(t *testing.T, c prometheus.Collector) map[string]map[string]float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]float64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			id := labelOf(m, "volume_id")
			if out[f.GetName()] == nil {
				out[f.GetName()] = map[string]float64{}
			}
			switch {
			case m.GetCounter() != nil:
				out[f.GetName()][id] = m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				out[f.GetName()][id] = m.GetGauge().GetValue()
			}
		}
	}
	return out
}

func labelOf(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

func TestVolumeCollector(t *testing.T) {
	f := newFakeNode(t)
	s := f.nodeServer
	add := func(id string, proc mountWorker, ctx map[string]string) *stagedVolume {
		v := s.newStagedVolume(&state.Volume{VolumeID: id, StagingPath: "/staging/" + id, Context: ctx})
		v.proc = proc
		s.mu.Lock()
		s.volumes[id] = v
		s.mu.Unlock()
		return v
	}
	a := newStatsFake(worker.Stats{ReadBytes: 100, WrittenBytes: 10, Dirty: 2, CacheBytes: 4096, Busy: true, OpenFiles: 3}, nil)
	va := add("a", a, map[string]string{"csi.storage.k8s.io/pvc/namespace": "team", "csi.storage.k8s.io/pvc/name": "data"})
	add("slow", newStatsFake(worker.Stats{}, errors.New("no answer")), nil)
	c := newVolumeCollector(s)

	got := scrape(t, c)
	for _, tc := range []struct {
		name, id string
		want     float64
	}{
		{"csi_rclone_volume_up", "a", 1},
		{"csi_rclone_volume_read_bytes_total", "a", 100},
		{"csi_rclone_volume_written_bytes_total", "a", 10},
		{"csi_rclone_volume_dirty_files", "a", 2},
		{"csi_rclone_volume_cache_bytes", "a", 4096},
		{"csi_rclone_volume_busy", "a", 1},
		{"csi_rclone_volume_open_files", "a", 3},
		{"csi_rclone_volume_up", "slow", 0},
		{"csi_rclone_volume_read_bytes_total", "slow", 0},
	} {
		if v, ok := got[tc.name][tc.id]; !ok || v != tc.want {
			t.Errorf("%s{volume_id=%q} = %v (present %t), want %v", tc.name, tc.id, v, ok, tc.want)
		}
	}
	if _, ok := got["csi_rclone_volume_dirty_files"]["slow"]; ok {
		t.Error("a worker that did not answer has gauges")
	}

	// A new worker (after a death) counts from zero: the volume's counters
	// go on from the old worker's.
	b := newStatsFake(worker.Stats{ReadBytes: 5, WrittenBytes: 1}, nil)
	s.mu.Lock()
	va.proc = b
	va.restarts, va.recoveries = 1, 1
	s.mu.Unlock()
	got = scrape(t, c)
	for name, want := range map[string]float64{
		"csi_rclone_volume_read_bytes_total": 105, "csi_rclone_volume_written_bytes_total": 11,
		"csi_rclone_volume_worker_restarts_total": 1, "csi_rclone_volume_remounts_total": 1,
	} {
		if v := got[name]["a"]; v != want {
			t.Errorf("after a restart %s = %v, want %v", name, v, want)
		}
	}

	// Unstaged: its series go.
	f.forget(va)
	if got = scrape(t, c); len(got["csi_rclone_volume_up"]) != 1 {
		t.Errorf("series after unstage: %v", got["csi_rclone_volume_up"])
	}
}
