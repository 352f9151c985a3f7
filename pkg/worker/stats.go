package worker

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/rclone/rclone/fs/accounting"
	"github.com/rclone/rclone/fs/rc"
	"github.com/rclone/rclone/vfs"
)

// Stats are a worker's numbers for its volume, as the "stats" command
// answers them. Counters count from the worker's start: the driver adds
// those of the workers that came before (see the driver's collector).
type Stats struct {
	// ReadBytes and WrittenBytes are what went from and to the remote
	// (rclone's accounting: downloads, and uploads from the VFS cache).
	// Reads served from the cache are not in them.
	ReadBytes    int64 `json:"readBytes"`
	WrittenBytes int64 `json:"writtenBytes"`
	// UploadErrors counts uploads that failed (rclone retries them);
	// Errors every error rclone's accounting saw.
	UploadErrors int64 `json:"uploadErrors"`
	Errors       int64 `json:"errors"`
	// Transfers in progress: files being read from the remote, and
	// uploads running.
	Reading   int `json:"reading"`
	Uploading int `json:"uploading"`
	// UploadsQueued are files closed and waiting for the write-back delay.
	UploadsQueued int `json:"uploadsQueued"`
	// OpenFiles are the file handles the kernel holds on the mount: every
	// open(2) of a file on it, by any process of any pod, until the last
	// close of that open.
	OpenFiles int `json:"openFiles"`
	// Busy: a file is open for write, or a cached file is open or not
	// uploaded yet (rclone's VFS.Busy).
	Busy bool `json:"busy"`
	// Dirty counts files in the cache not yet uploaded; -1 when the cache
	// could not be read.
	Dirty int `json:"dirty"`
	// CacheBytes and CacheFiles are what the VFS cache holds;
	// ErroredFiles the cached files whose upload failed last time.
	CacheBytes   int64 `json:"cacheBytes"`
	CacheFiles   int   `json:"cacheFiles"`
	ErroredFiles int   `json:"erroredFiles"`
}

// tallyPoll is how often a worker looks at rclone's finished transfers, of
// which rclone keeps the last hundred only.
const tallyPoll = time.Second

// tally turns rclone's accounting, which keeps the bytes of all transfers
// together and the finished ones for a while only, into monotonic counters
// by direction. It must look more often than a hundred transfers finish.
type tally struct {
	mu                  sync.Mutex
	seen                map[string]bool // finished transfers already counted
	doneRead, doneWrite int64
	uploadErrors        int64
	// last reported, so that a transfer that finished and was pruned
	// between two looks never makes a counter go back
	lastRead, lastWrite int64
}

func newTally() *tally { return &tally{seen: map[string]bool{}} }

// transfer is what tally needs of one transfer, finished or not.
type transfer struct {
	key    string // unique over the worker's life
	upload bool   // to the remote
	bytes  int64
	failed bool
}

// observe counts newly finished transfers, once each, and adds the bytes of
// those in progress. The finished ones must be read before those in
// progress: a transfer that finishes in between is then missed for one look
// (and the last value stands) rather than counted twice.
func (t *tally) observe(finished, running []transfer) (read, written, uploadErrors int64, reading, uploading int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	seen := make(map[string]bool, len(finished))
	for _, tr := range finished {
		seen[tr.key] = true
		if t.seen[tr.key] {
			continue
		}
		if tr.upload {
			t.doneWrite += tr.bytes
			if tr.failed {
				t.uploadErrors++
			}
		} else {
			t.doneRead += tr.bytes
		}
	}
	t.seen = seen // what rclone pruned cannot come back
	read, written = t.doneRead, t.doneWrite
	for _, tr := range running {
		if tr.upload {
			written += tr.bytes
			uploading++
		} else {
			read += tr.bytes
			reading++
		}
	}
	t.lastRead, t.lastWrite = max(t.lastRead, read), max(t.lastWrite, written)
	return t.lastRead, t.lastWrite, t.uploadErrors, reading, uploading
}

// look reads rclone's global accounting (a worker has one volume, so all of
// it is the volume's).
func (t *tally) look() (read, written, uploadErrors int64, reading, uploading int) {
	s := accounting.GlobalStats()
	var finished []transfer
	for _, ts := range s.Transferred() {
		if ts.Checked {
			continue
		}
		finished = append(finished, transfer{
			key:    fmt.Sprintf("%s\x00%d\x00%s", ts.Name, ts.StartedAt.UnixNano(), ts.DstFs),
			upload: ts.DstFs != "", bytes: ts.Bytes, failed: ts.Error != nil,
		})
	}
	var running []transfer
	if out, err := s.RemoteStats(false); err == nil {
		items, _ := out["transferring"].([]rc.Params)
		for _, it := range items {
			b, _ := it["bytes"].(int64)
			dst, _ := it["dstFs"].(string)
			running = append(running, transfer{upload: dst != "", bytes: b})
		}
	}
	return t.observe(finished, running)
}

// run looks every tallyPoll until ctx ends.
func (t *tally) run(ctx context.Context) {
	tick := time.NewTicker(tallyPoll)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			t.look()
		}
	}
}

// volumeStats gathers the stats of the worker's one VFS.
func volumeStats(v *vfs.VFS, t *tally, cacheDir string, openFiles int) Stats {
	st := Stats{OpenFiles: openFiles}
	st.ReadBytes, st.WrittenBytes, st.UploadErrors, st.Reading, st.Uploading = t.look()
	st.Errors = accounting.GlobalStats().GetErrors()
	st.Busy = v.Busy()
	if cache, ok := v.Stats()["diskCache"].(rc.Params); ok {
		st.CacheFiles = int(asInt64(cache["files"]))
		st.ErroredFiles = int(asInt64(cache["erroredFiles"]))
		st.UploadsQueued = int(asInt64(cache["uploadsQueued"]))
	}
	// rclone's own byte count is updated by its cleaner only, once a
	// minute: the cache dir says it now.
	if err := cacheUsage(cacheDir, &st); err != nil {
		st.Dirty = -1
	}
	return st
}

// cacheUsage counts the files of a cache dir not uploaded yet and the bytes
// its data files take on disk (they are sparse: what was read or written).
func cacheUsage(cacheDir string, st *Stats) error {
	st.Dirty, st.CacheBytes = 0, 0
	return walkCache(cacheDir, func(e *cacheEntry) error {
		if e.notUploaded() {
			st.Dirty++
		}
		st.CacheBytes += e.diskBytes()
		return nil
	})
}

func asInt64(v any) int64 {
	switch n := v.(type) {
	case int:
		return int64(n)
	case int32:
		return int64(n)
	case int64:
		return n
	case string:
		i, _ := strconv.ParseInt(n, 10, 64)
		return i
	}
	return 0
}

// Stats asks the worker for its numbers, waiting until ctx ends at most.
func (p *Process) Stats(ctx context.Context) (Stats, error) { return p.stats(ctx, p.done) }

// stats is Stats for a worker that is gone once done is closed.
func (p *session) stats(ctx context.Context, done <-chan struct{}) (Stats, error) {
	select {
	case <-done:
		return Stats{}, fmt.Errorf("%w: the worker is gone", ErrMount)
	default:
	}
	id, answer, err := p.send(command{Op: opStats})
	if err != nil {
		return Stats{}, fmt.Errorf("%w: the worker is gone", ErrMount)
	}
	defer p.forget(id)
	select {
	case ev := <-answer:
		if ev.Type != evStats || ev.Stats == nil {
			return Stats{}, errorFromEvent(ev)
		}
		return *ev.Stats, nil
	case <-p.gone:
		return Stats{}, fmt.Errorf("%w: the worker is gone", ErrMount)
	case <-ctx.Done():
		return Stats{}, fmt.Errorf("%w: the worker did not answer in time: %w", ErrUnavailable, ctx.Err())
	}
}
