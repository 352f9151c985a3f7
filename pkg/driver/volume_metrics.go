package driver

import (
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/klog/v2"

	"github.com/csi-rclone/csi-rclone/pkg/worker"
	"github.com/csi-rclone/csi-rclone/secrets"
)

// statsTimeout bounds how long a scrape waits for one worker's numbers; a
// worker that does not answer in time is reported down for that scrape.
const statsTimeout = 2 * time.Second

// statsWorker is a worker that answers the "stats" command: *worker.Process.
// Kept out of mountWorker so that other launchers need not answer it; their
// volumes show the driver's own series only.
type statsWorker interface {
	Stats(ctx context.Context) (worker.Stats, error)
}

var _ statsWorker = (*worker.Process)(nil)

var volumeLabels = []string{"volume_id", "pvc_namespace", "pvc_name"}

func volumeDesc(name, help string) *prometheus.Desc {
	return prometheus.NewDesc("csi_rclone_volume_"+name, help, volumeLabels, nil)
}

// The per-volume series. Their names are what deploy/grafana queries.
var (
	descUp           = volumeDesc("up", "1 when the volume's mount worker answered this scrape, 0 when it did not (dead, being mounted again, or too slow).")
	descReadBytes    = volumeDesc("read_bytes_total", "Bytes read from the remote (downloads into reads and the VFS cache); reads served from the cache are not counted.")
	descWrittenBytes = volumeDesc("written_bytes_total", "Bytes written to the remote (uploads from the VFS cache).")
	descUploadErrors = volumeDesc("upload_errors_total", "Uploads to the remote that failed (rclone retries them).")
	descErrors       = volumeDesc("errors_total", "Errors rclone's accounting counted for the volume.")
	descBusy         = volumeDesc("busy", "1 while a file is open for write, or a cached file is open or not yet uploaded: unstage waits for 0.")
	descOpenFiles    = volumeDesc("open_files", "Files open on the volume now, by any process on the node: the kernel's open file handles on its mount.")
	descReading      = volumeDesc("reading_files", "Files being read from the remote now.")
	descUploading    = volumeDesc("uploading_files", "Uploads running now.")
	descQueued       = volumeDesc("queued_uploads", "Files closed and waiting for the write-back delay before their upload.")
	descDirty        = volumeDesc("dirty_files", "Files in the VFS cache not yet uploaded.")
	descCacheBytes   = volumeDesc("cache_bytes", "Bytes the VFS cache holds on the node.")
	descCacheFiles   = volumeDesc("cache_files", "Files the VFS cache holds on the node.")
	descErroredFiles = volumeDesc("errored_files", "Cached files whose last upload failed.")
	descRecoveries   = volumeDesc("remounts_total", "Times the volume was mounted again after a driver restart or a worker death (csi_rclone_volume_recoveries_total counts the attempts of all volumes).")
	descRestarts     = volumeDesc("worker_restarts_total", "Deaths of the volume's mount worker while it was staged.")
)

// volumeCollector asks each staged volume's worker for its numbers at
// scrape time. Counters add up over the volume's workers: the numbers of a
// worker that died are kept as the base of the next one's. A volume's series
// go when it is unstaged.
type volumeCollector struct {
	node *nodeServer

	mu   sync.Mutex
	seen map[*stagedVolume]*volumeTotals
}

// volumeTotals are what the collector keeps of one volume between scrapes.
type volumeTotals struct {
	proc       mountWorker  // whose numbers last is
	last, base worker.Stats // of proc; sums of the workers before
}

func newVolumeCollector(n *nodeServer) *volumeCollector {
	return &volumeCollector{node: n, seen: map[*stagedVolume]*volumeTotals{}}
}

func (c *volumeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descUp, descReadBytes, descWrittenBytes, descUploadErrors, descErrors, descBusy, descOpenFiles, descReading,
		descUploading, descQueued, descDirty, descCacheBytes, descCacheFiles, descErroredFiles, descRecoveries, descRestarts} {
		ch <- d
	}
}

// volumeSample is one volume as a scrape found it.
type volumeSample struct {
	v                    *stagedVolume
	proc                 mountWorker
	labels               []string
	recoveries, restarts int
	stats                worker.Stats
	up                   bool
}

// Collect asks every worker at once, each for up to statsTimeout. It holds
// the node server's mutex only to copy the list of volumes, and no volume's
// lock: a scrape never waits for a stage or an unstage, nor they for it.
func (c *volumeCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.node
	s.mu.Lock()
	samples := make([]*volumeSample, 0, len(s.volumes))
	for _, v := range s.volumes {
		samples = append(samples, &volumeSample{
			v: v, proc: v.proc, recoveries: v.recoveries, restarts: v.restarts,
			labels: []string{v.id, v.rec.Context[secrets.KeyPVCNamespace], v.rec.Context[secrets.KeyPVCName]},
		})
	}
	s.mu.Unlock()

	var wg sync.WaitGroup
	for _, smp := range samples {
		sw, ok := smp.proc.(statsWorker)
		if !ok || smp.proc == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), statsTimeout)
			defer cancel()
			st, err := sw.Stats(ctx)
			if err != nil {
				klog.V(4).InfoS("no stats from the mount worker", "volumeID", smp.v.id, "err", err)
				return
			}
			smp.stats, smp.up = st, true
		}()
	}
	wg.Wait()

	c.mu.Lock()
	defer c.mu.Unlock()
	live := make(map[*stagedVolume]*volumeTotals, len(samples))
	for _, smp := range samples {
		t := c.seen[smp.v]
		if t == nil {
			t = &volumeTotals{proc: smp.proc}
		}
		live[smp.v] = t
		if smp.proc != t.proc { // a new worker counts from zero
			t.base, t.last, t.proc = addCounters(t.base, t.last), worker.Stats{}, smp.proc
		}
		if smp.up {
			t.last = smp.stats
		}
		c.emit(ch, smp, t)
	}
	c.seen = live // unstaged volumes' series go
}

// addCounters sums the counters of two workers' stats.
func addCounters(a, b worker.Stats) worker.Stats {
	return worker.Stats{
		ReadBytes: a.ReadBytes + b.ReadBytes, WrittenBytes: a.WrittenBytes + b.WrittenBytes,
		UploadErrors: a.UploadErrors + b.UploadErrors, Errors: a.Errors + b.Errors,
	}
}

func (c *volumeCollector) emit(ch chan<- prometheus.Metric, smp *volumeSample, t *volumeTotals) {
	l := smp.labels
	gauge := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, l...)
	}
	counter := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, l...)
	}
	counter(descRecoveries, float64(smp.recoveries))
	counter(descRestarts, float64(smp.restarts))
	sum := addCounters(t.base, t.last)
	counter(descReadBytes, float64(sum.ReadBytes))
	counter(descWrittenBytes, float64(sum.WrittenBytes))
	counter(descUploadErrors, float64(sum.UploadErrors))
	counter(descErrors, float64(sum.Errors))
	if !smp.up {
		gauge(descUp, 0)
		return // no gauge is better than a stale one
	}
	gauge(descUp, 1)
	st := smp.stats
	gauge(descBusy, boolValue(st.Busy))
	gauge(descOpenFiles, float64(st.OpenFiles))
	gauge(descReading, float64(st.Reading))
	gauge(descUploading, float64(st.Uploading))
	gauge(descQueued, float64(st.UploadsQueued))
	if st.Dirty >= 0 {
		gauge(descDirty, float64(st.Dirty))
	}
	gauge(descCacheBytes, float64(st.CacheBytes))
	gauge(descCacheFiles, float64(st.CacheFiles))
	gauge(descErroredFiles, float64(st.ErroredFiles))
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// metricsHandler serves the process-wide metrics and, on a node, this
// driver's per-volume ones (a registry per driver: tests run several).
func (d *Driver) metricsHandler() http.Handler {
	g := prometheus.Gatherers{metrics}
	if d.node != nil {
		reg := prometheus.NewRegistry()
		reg.MustRegister(newVolumeCollector(d.node))
		g = append(g, reg)
	}
	return promhttp.HandlerFor(g, promhttp.HandlerOpts{})
}
