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
	}
	DefaultMountOptions = map[string]string{}
)
