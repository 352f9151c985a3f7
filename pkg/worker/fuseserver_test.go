package worker

import (
	"sync/atomic"
	"testing"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// rawFake answers OPEN and CREATE with status, and STATFS with 1000 free
// blocks of 4 KiB.
type rawFake struct {
	fuse.RawFileSystem
	status fuse.Status
}

func (r rawFake) Open(<-chan struct{}, *fuse.OpenIn, *fuse.OpenOut) fuse.Status { return r.status }
func (r rawFake) Create(<-chan struct{}, *fuse.CreateIn, string, *fuse.CreateOut) fuse.Status {
	return r.status
}
func (r rawFake) Release(<-chan struct{}, *fuse.ReleaseIn) {}
func (r rawFake) StatFs(_ <-chan struct{}, _ *fuse.InHeader, out *fuse.StatfsOut) fuse.Status {
	out.Bsize, out.Blocks, out.Bfree, out.Bavail = 4096, 2000, 1000, 1000
	return fuse.OK
}

func TestHandleFSCountsOpens(t *testing.T) {
	for _, tc := range []struct {
		name   string
		status fuse.Status
		want   int64
	}{
		{"opens that succeed count until released", fuse.OK, 2},
		{"refused opens do not count", fuse.EACCES, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var open atomic.Int64
			h := &handleFS{RawFileSystem: rawFake{RawFileSystem: fuse.NewDefaultRawFileSystem(), status: tc.status}, open: &open}
			h.Open(nil, &fuse.OpenIn{}, &fuse.OpenOut{})
			h.Create(nil, &fuse.CreateIn{}, "f", &fuse.CreateOut{})
			if got := open.Load(); got != tc.want {
				t.Fatalf("after an open and a create: %d, want %d", got, tc.want)
			}
			// The kernel sends RELEASE only for opens that succeeded.
			for range tc.want {
				h.Release(nil, &fuse.ReleaseIn{})
			}
			if got := open.Load(); got != 0 {
				t.Fatalf("after the releases: %d", got)
			}
		})
	}
}

func TestHandleFSBoundsFree(t *testing.T) {
	for _, tc := range []struct {
		name      string
		cacheFree func() (int64, bool)
		want      uint64
	}{
		{"rclone's figure where the backend says", nil, 1000},
		{"the cache's room when smaller", func() (int64, bool) { return 400*4096 + 100, true }, 400},
		{"never more than rclone's", func() (int64, bool) { return 1 << 40, true }, 1000},
		{"a full cache", func() (int64, bool) { return 0, true }, 0},
		{"rclone's figure when the cache cannot say", func() (int64, bool) { return 0, false }, 1000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := &handleFS{RawFileSystem: rawFake{RawFileSystem: fuse.NewDefaultRawFileSystem()}, open: new(atomic.Int64), cacheFree: tc.cacheFree}
			var out fuse.StatfsOut
			if st := h.StatFs(nil, &fuse.InHeader{}, &out); !st.Ok() {
				t.Fatal(st)
			}
			if out.Bfree != tc.want || out.Bavail != tc.want || out.Blocks != 2000 {
				t.Errorf("free %d, avail %d, blocks %d; want %d free of 2000", out.Bfree, out.Bavail, out.Blocks, tc.want)
			}
		})
	}
}
