package main

import (
	"flag"
	"fmt"

	"github.com/rclone/rclone/fs"

	"github.com/csi-rclone/csi-rclone/secrets"
)

// tenantFlags are the operator's word on what a stage secret may ask for
// (secrets.Policy; SECURITY.md explains each).
type tenantFlags struct {
	allowBackends, allowOptions, denyNetworks string
	limits                                    secrets.Limits
	workerMemory                              fs.SizeSuffix
}

func (t *tenantFlags) register(fl *flag.FlagSet) {
	fl.StringVar(&t.allowBackends, "tenant-allow-backends", "", "comma-separated rclone backend types that tenants may use although denied by default (see SECURITY.md)")
	fl.StringVar(&t.allowOptions, "tenant-allow-options", "", "comma-separated rclone option names, or option=value pairs, that tenants may set although denied by default (see SECURITY.md)")
	fl.StringVar(&t.denyNetworks, "tenant-deny-networks", "", "comma-separated CIDRs that no remote may be addressed in, beside link-local and metadata addresses (e.g. loopback and the cluster's pod and service ranges)")
	size := func(p *fs.SizeSuffix, name string, def fs.SizeSuffix, usage string) {
		*p = def
		fl.Var(p, name, usage+" (rclone size syntax; -1: no limit)")
	}
	size(&t.limits.CacheSize, "tenant-max-cache-size", secrets.DefaultCacheSizeLimit, "largest VFS cache a volume may ask for")
	size(&t.limits.DefaultCacheSize, "default-cache-size", secrets.DefaultVolumeCacheSize, "VFS cache limit of a volume that sets none")
	size(&t.limits.ReadAhead, "tenant-max-read-ahead", secrets.DefaultReadAheadLimit, "largest vfs_read_ahead and max_read_ahead (the kernel read-ahead of the mount)")
	size(&t.limits.ChunkSize, "tenant-max-chunk-size", secrets.DefaultChunkSizeLimit, "largest read chunk and backend upload chunk")
	size(&t.limits.BufferSize, "tenant-max-buffer-size", secrets.DefaultBufferSizeLimit, "largest in-memory buffer option of a backend")
	fl.IntVar(&t.limits.Streams, "tenant-max-streams", secrets.DefaultStreamsLimit, "most parallel streams, concurrent uploads, transfers or checkers a volume may ask for (-1: no limit)")
	size(&t.workerMemory, "worker-memory-limit", 2*fs.Gibi, "data segment limit of each mount worker (RLIMIT_DATA); a worker past it dies and is started again")
	fl.IntVar(&t.limits.ValueBytes, "tenant-max-value-bytes", secrets.DefaultValueBytesLimit, "largest value of a stage secret or volume context key")
	fl.IntVar(&t.limits.SecretBytes, "tenant-max-secret-bytes", secrets.DefaultSecretBytesLimit, "largest stage secret and volume context, together")
}

func (t *tenantFlags) policy() (secrets.Policy, error) {
	nets, err := secrets.ParseNetworks(t.denyNetworks)
	if err != nil {
		return secrets.Policy{}, fmt.Errorf("--tenant-deny-networks: %w", err)
	}
	if t.limits.DefaultCacheSize > t.limits.CacheSize && t.limits.CacheSize >= 0 {
		return secrets.Policy{}, fmt.Errorf("--default-cache-size %s is above --tenant-max-cache-size %s", t.limits.DefaultCacheSize, t.limits.CacheSize)
	}
	if t.limits.ValueBytes <= 0 || t.limits.SecretBytes <= 0 {
		return secrets.Policy{}, fmt.Errorf("--tenant-max-value-bytes and --tenant-max-secret-bytes must be positive")
	}
	return secrets.Policy{
		AllowBackends: splitList(t.allowBackends),
		AllowOptions:  splitList(t.allowOptions),
		Limits:        t.limits,
		DenyNetworks:  nets,
	}, nil
}
