package secrets

import (
	"testing"

	"github.com/rclone/rclone/fs"
)

// A limit written for rclone reads back as the same number of bytes, where
// fs.SizeSuffix.String would round it or rclone read a bare number as KiB.
func TestExactSizeReadsBack(t *testing.T) {
	for _, n := range []fs.SizeSuffix{512, 1000, 4194280, 4 << 20, 5 * fs.Gibi} {
		var got fs.SizeSuffix
		if err := got.Set(exactSize(n)); err != nil || got != n {
			t.Errorf("%d written as %q reads back as %d (%v)", int64(n), exactSize(n), int64(got), err)
		}
	}
}

// A default above a lowered limit comes down to it, exactly; one below, or
// with no limit, stays.
func TestClampDefaults(t *testing.T) {
	l := Limits{Streams: 2, ChunkSize: 4194280, ReadAhead: -1}.WithDefaults()
	for _, tc := range []struct{ key, name, value, want string }{
		{KeyVFSOpt, "vfs_read_chunk_streams", "8", "2"},
		{KeyVFSOpt, "vfs_read_chunk_streams", "1", "1"},
		{KeyVFSOpt, "vfs_read_chunk_size", "16M", "4194280B"},
		{KeyVFSOpt, "vfs_read_chunk_size", "1M", "1M"},
		{KeyMountOpt, "max_read_ahead", "4M", "4M"},
		{KeyVFSOpt, "no_checksum", "true", "true"},
		{KeyVFSOpt, "not_an_option", "9", "9"},
	} {
		p := &Policy{Limits: l}
		if got := p.FitDefault(tc.key, tc.name, tc.value); got != tc.want {
			t.Errorf("%s %s=%s: %q, want %q", tc.key, tc.name, tc.value, got, tc.want)
		}
	}
}
