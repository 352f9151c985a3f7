package secrets

import (
	"strconv"
	"strings"
	"time"

	"github.com/rclone/rclone/fs"
)

// Limits bound what one tenant's volume may take of a shared node. A tenant
// value above a limit is refused, never clamped: a silently smaller cache or
// fewer streams than asked for would surprise whoever wrote the value.
// Zero fields take the Default* values; a negative one means no limit.
type Limits struct {
	// CacheSize bounds the VFS cache of a volume (vfs_cache_max_size) and
	// other options that hold files on the node's disk.
	CacheSize fs.SizeSuffix
	// DefaultCacheSize is the cache limit of a volume that sets none:
	// rclone's own default is no limit.
	DefaultCacheSize fs.SizeSuffix
	// ReadAhead bounds vfs_read_ahead and max_read_ahead.
	ReadAhead fs.SizeSuffix
	// ChunkSize bounds read chunks (vfs_read_chunk_size, _limit) and the
	// upload chunks of backends (chunk_size, *_chunk_size), which a backend
	// holds in memory once per concurrent upload.
	ChunkSize fs.SizeSuffix
	// BufferSize bounds options that size an in-memory buffer (buffer_size,
	// *_memory_limit, ram_cache_limit, ...).
	BufferSize fs.SizeSuffix
	// Streams bounds parallelism: vfs_read_chunk_streams, *concurrency,
	// transfers, checkers, workers, list_parallelism.
	Streams int
	// ValueBytes bounds one value; SecretBytes the stage secret and volume
	// context together (keys and values).
	ValueBytes, SecretBytes int
}

// The default limits: a session's working set, with room, on a node shared
// by tens of volumes. Worst-case upload memory of one volume is about
// ChunkSize × Streams per concurrent transfer.
const (
	DefaultCacheSizeLimit   = 20 * fs.Gibi
	DefaultVolumeCacheSize  = 5 * fs.Gibi
	DefaultReadAheadLimit   = 1 * fs.Gibi
	DefaultChunkSizeLimit   = 128 * fs.Mebi
	DefaultBufferSizeLimit  = 256 * fs.Mebi
	DefaultStreamsLimit     = 8
	DefaultValueBytesLimit  = 16 << 10
	DefaultSecretBytesLimit = 64 << 10
)

// WithDefaults fills zero fields with the defaults.
func (l Limits) WithDefaults() Limits {
	set := func(v *fs.SizeSuffix, d fs.SizeSuffix) {
		if *v == 0 {
			*v = d
		}
	}
	set(&l.CacheSize, DefaultCacheSizeLimit)
	set(&l.DefaultCacheSize, DefaultVolumeCacheSize)
	if l.CacheSize >= 0 && l.DefaultCacheSize > l.CacheSize {
		l.DefaultCacheSize = l.CacheSize
	}
	set(&l.ReadAhead, DefaultReadAheadLimit)
	set(&l.ChunkSize, DefaultChunkSizeLimit)
	set(&l.BufferSize, DefaultBufferSizeLimit)
	if l.Streams == 0 {
		l.Streams = DefaultStreamsLimit
	}
	if l.ValueBytes == 0 {
		l.ValueBytes = DefaultValueBytesLimit
	}
	if l.SecretBytes == 0 {
		l.SecretBytes = DefaultSecretBytesLimit
	}
	return l
}

// limitedOption is one bounded family of options.
type limitedOption struct {
	what  string // for the error: "the VFS cache size"
	match func(name string) bool
	size  func(Limits) fs.SizeSuffix // for kindSize options
	count func(Limits) int           // for kindInt options
	// minCount is the least a kindInt option may be, where a small value
	// costs the node (max_upload_parts = 1 makes one chunk of a file).
	minCount int
	// minDuration and maxDuration bound kindDuration options; zeroOK lets
	// 0 through (it switches the feature off, at no cost).
	minDuration, maxDuration time.Duration
	zeroOK                   bool
}

func named(names ...string) func(string) bool {
	return func(n string) bool {
		for _, x := range names {
			if n == x {
				return true
			}
		}
		return false
	}
}

var limitedOptions = []limitedOption{
	{
		what:  "the cache size",
		match: named("vfs_cache_max_size", "speedup_max_disk", "chunk_total_size"),
		size:  func(l Limits) fs.SizeSuffix { return l.CacheSize },
	},
	{
		// max_read_ahead becomes the kernel's read-ahead of the mount
		// (pkg/worker sets the bdi), in page cache per file read.
		what:  "the read-ahead",
		match: named("vfs_read_ahead", "max_read_ahead"),
		size:  func(l Limits) fs.SizeSuffix { return l.ReadAhead },
	},
	{
		what: "the chunk size",
		match: func(n string) bool {
			return n == "chunk_size" || strings.HasSuffix(n, "_chunk_size") || n == "vfs_read_chunk_size_limit"
		},
		size: func(l Limits) fs.SizeSuffix { return l.ChunkSize },
	},
	{
		what: "the buffer size",
		match: func(n string) bool {
			return n == "buffer_size" || strings.HasSuffix(n, "_buffer_size") || strings.HasSuffix(n, "_memory_limit") ||
				strings.HasSuffix(n, "_max_memory") || n == "ram_cache_limit"
		},
		size: func(l Limits) fs.SizeSuffix { return l.BufferSize },
	},
	{
		what: "the number of streams",
		match: func(n string) bool {
			return strings.HasSuffix(n, "concurrency") || strings.HasSuffix(n, "_streams") ||
				n == "transfers" || n == "checkers" || n == "workers" || n == "list_parallelism"
		},
		count: func(l Limits) int { return l.Streams },
	},
	{
		// rclone picks chunk = size / max_upload_parts for a large file and
		// holds a chunk in memory: few parts would bypass the chunk limit.
		what:     "the number of upload parts",
		match:    named("max_upload_parts"),
		minCount: 1000,
	},
	{
		// The cleaner enforces vfs_cache_max_size: 0 turns it off, a tiny
		// interval makes it spin.
		what:        "the cache poll interval",
		match:       named("vfs_cache_poll_interval"),
		minDuration: time.Second,
	},
	{
		what:        "the poll interval",
		match:       named("poll_interval"),
		minDuration: time.Second,
		zeroOK:      true,
	},
	{
		// A handle kept open keeps its file from eviction and a goroutine.
		what:        "the handle caching",
		match:       named("vfs_handle_caching"),
		maxDuration: time.Minute,
		zeroOK:      true,
	},
	{
		what:        "the directory cache time",
		match:       named("dir_cache_time"),
		maxDuration: 24 * time.Hour,
		zeroOK:      true,
	},
}

// checkLimit refuses a value of a bounded option above its limit. "off" and
// negative sizes mean unlimited to rclone, and so are above any limit.
func (l Limits) checkLimit(where string, o backendOption, value string) error {
	for _, lo := range limitedOptions {
		if !lo.match(o.name) {
			continue
		}
		switch {
		case o.kind == kindSize && lo.size != nil:
			var v fs.SizeSuffix
			if err := v.Set(value); err != nil {
				return invalidf("%s: option %q is not a size", where, o.name)
			}
			if max := lo.size(l); max >= 0 && (v < 0 || v > max) {
				return invalidf("%s: option %q = %s is above %s this cluster allows (%s)", where, o.name, value, lo.what, max)
			}
		case o.kind == kindInt && (lo.count != nil || lo.minCount != 0):
			v, err := strconv.ParseInt(strings.TrimSpace(value), 10, 64)
			if err != nil {
				return invalidf("%s: option %q is not a number", where, o.name)
			}
			if lo.count != nil {
				if max := lo.count(l); max >= 0 && (v < 0 || v > int64(max)) {
					return invalidf("%s: option %q = %d is above %s this cluster allows (%d)", where, o.name, v, lo.what, max)
				}
			}
			if v < int64(lo.minCount) {
				return invalidf("%s: option %q = %d is below %s this cluster allows (%d)", where, o.name, v, lo.what, lo.minCount)
			}
		case o.kind == kindDuration:
			var d fs.Duration
			if err := d.Set(value); err != nil {
				return invalidf("%s: option %q is not a duration", where, o.name)
			}
			v := time.Duration(d)
			if v == 0 && lo.zeroOK {
				continue
			}
			if lo.minDuration > 0 && v < lo.minDuration {
				return invalidf("%s: option %q = %s is below %s this cluster allows (%s)", where, o.name, value, lo.what, lo.minDuration)
			}
			if lo.maxDuration > 0 && (v < 0 || v > lo.maxDuration) {
				return invalidf("%s: option %q = %s is above %s this cluster allows (%s)", where, o.name, value, lo.what, lo.maxDuration)
			}
		}
	}
	return nil
}

// clamp lowers a value of a bounded size or count option to its limit. For
// the driver's own defaults only: a tenant's value above a limit is refused.
func (l Limits) clamp(o backendOption, value string) string {
	for _, lo := range limitedOptions {
		if !lo.match(o.name) {
			continue
		}
		switch {
		case o.kind == kindSize && lo.size != nil:
			var v fs.SizeSuffix
			if max := lo.size(l); v.Set(value) == nil && max >= 0 && (v < 0 || v > max) {
				value = exactSize(max)
			}
		case o.kind == kindInt && lo.count != nil:
			v, err := strconv.ParseInt(strings.TrimSpace(value), 10, 64)
			if max := lo.count(l); err == nil && max >= 0 && (v < 0 || v > int64(max)) {
				value = strconv.Itoa(max)
			}
		}
	}
	return value
}

// exactSize writes a size as rclone reads it back exactly: in bytes.
// fs.SizeSuffix.String rounds ("4.000Mi"), and a bare number is KiB to
// rclone.
func exactSize(s fs.SizeSuffix) string { return strconv.FormatInt(int64(s), 10) + "B" }
