package driver

// DefaultVFSOptions and DefaultMountOptions are the rclone options every
// volume gets unless its tenant sets them (vfsOpt, mountOpt): the uid, gid
// and umask of applyOptions, then these, then the tenant's. Each value, and
// the measurement behind it, is in docs/benchmarks.md ("Defaults").
// Exported for the benchmarks, which give a plain rclone mount the same.
var (
	DefaultVFSOptions = map[string]string{
		"vfs_cache_mode": "writes", // lets ordinary programs write (seek, rewrite)
		"umask":          "0002",   // group-writable, so that fsGroup members write
		// Parallel ranged GETs for a file read in order: one stream from
		// an object store tens of ms away is bound by its latency and by
		// what the store gives one connection, and 4 streams still left
		// the read waiting on round trips; 16M rather than 8M halves the
		// requests, each a round trip. At most streams × chunk (128 MiB)
		// in memory per open file, with rclone's 16M buffer_size on top.
		"vfs_read_chunk_streams": "8",
		"vfs_read_chunk_size":    "16M",
		// No MD5 of every byte read in order, checked at close: it ran
		// inline in the one read path of a file and cost it half its CPU;
		// a mismatch could only fail close(2), after the data was read;
		// and S3 objects uploaded in parts by tools other than rclone have
		// no MD5 to check against. TLS guards the transfer (SECURITY.md:
		// plain HTTP does not). A volume sets it to false to keep it.
		"no_checksum": "true",
	}
	DefaultMountOptions = map[string]string{
		// The driver writes it to the mount's bdi (read_ahead_kb), which
		// Linux otherwise holds at 128 KiB for FUSE: the kernel keeps
		// several 1 MiB reads in flight where FUSE round trips are the
		// limit.
		"max_read_ahead": "4M",
	}
)
