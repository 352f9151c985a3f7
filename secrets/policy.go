package secrets

import (
	"slices"
	"strings"

	"github.com/rclone/rclone/cmd/mountlib"
	"github.com/rclone/rclone/fs"
	"github.com/rclone/rclone/fs/config/configstruct"
	"github.com/rclone/rclone/vfs/vfscommon"

	_ "github.com/rclone/rclone/backend/all" // the registry that types and options are checked against
)

// Policy says what a tenant may put in a stage secret. The zero value is the
// default: every backend and option except those that run commands, read or
// write node files, or borrow the node's own identity. An operator widens it
// with AllowBackends and AllowOptions (see SECURITY.md).
type Policy struct {
	// AllowBackends lists denied backend types the operator allows anyway.
	AllowBackends []string
	// AllowOptions lists denied option names the operator allows anyway.
	AllowOptions []string
}

// deniedBackends touch the node's own filesystem.
var deniedBackends = []string{"local", "cache"}

// deniedOptions run a command, name a node file, or use the node's identity.
var deniedOptions = []string{
	"ssh", "env_auth", "use_msi", "use_az", "key_use_agent", "use_kerberos",
	"profile", "config_profile", "unix_socket",
}

// deniedOptionSuffixes and prefixes catch whole families of such options
// (md5sum_command, key_file, db_path, kerberos_ccache, unix_socket,
// msi_client_id, ...).
var (
	deniedOptionSuffixes = []string{"_command", "_file", "_path", "_ccache", "_socket"}
	deniedOptionPrefixes = []string{"msi_"}
)

// referenceOptions name other remotes, in wrapping backends (alias, crypt,
// union, combine, chunker, ...). They may only name sections of the same
// config, never a local path or an on-the-fly ":backend,opt=value:" remote.
var referenceOptions = []string{"remote", "upstreams"}

// mount options a tenant may not set: they daemonise, or pass raw FUSE flags.
var deniedMountOptions = []string{"daemon", "daemon_wait", "daemon_timeout", "option", "fuse_flag", "debug_fuse", "allow_non_empty"}

func (p *Policy) backendAllowed(typ string) bool {
	return !slices.Contains(deniedBackends, typ) || slices.Contains(p.AllowBackends, typ)
}

func (p *Policy) optionAllowed(name string) bool {
	if slices.Contains(p.AllowOptions, name) {
		return true
	}
	if slices.Contains(deniedOptions, name) {
		return false
	}
	for _, s := range deniedOptionSuffixes {
		if strings.HasSuffix(name, s) {
			return false
		}
	}
	for _, s := range deniedOptionPrefixes {
		if strings.HasPrefix(name, s) {
			return false
		}
	}
	return true
}

// checkConfig validates every section reachable or not from root: a tenant
// could otherwise hide a denied section that another option later names.
func (p *Policy) checkConfig(cfg Config, root string) error {
	refs := map[string][]string{}
	for _, name := range sortedKeys(cfg) {
		section := cfg[name]
		typ := section["type"]
		if typ == "" {
			return invalidf("section %q has no type", name)
		}
		if _, err := fs.Find(typ); err != nil {
			return invalidf("section %q: unknown backend type %q", name, typ)
		}
		if !p.backendAllowed(typ) {
			return invalidf("section %q: backend type %q is not allowed on this cluster", name, typ)
		}
		for _, key := range sortedKeys(section) {
			if !p.optionAllowed(key) {
				return invalidf("section %q: option %q is not allowed on this cluster", name, key)
			}
			if slices.Contains(referenceOptions, key) {
				names, err := referencedRemotes(cfg, name, key, section[key])
				if err != nil {
					return err
				}
				refs[name] = append(refs[name], names...)
			}
		}
	}
	return checkNoCycle(refs, root)
}

// referencedRemotes parses the remotes named by a reference option the way
// rclone reads it: "remote" is one remote (its path may hold spaces);
// "upstreams" is a space-separated list (quotes allowed), of "remote:path"
// with an optional ":ro", ":nc" or ":writeback" for union, and of
// "dir=remote:path" for combine. Each must name a section of this config:
// never a local path, an on-the-fly ":backend:" or a "name,opt=value:".
func referencedRemotes(cfg Config, section, key, value string) ([]string, error) {
	if strings.TrimSpace(value) == "" {
		return nil, invalidf("section %q option %q is empty", section, key)
	}
	items := []string{value}
	if key == "upstreams" {
		var list fs.SpaceSepList
		if err := list.Set(value); err != nil {
			return nil, invalidf("section %q option %q is not a list of remotes", section, key)
		}
		items = list
	}
	var names []string
	for _, item := range items {
		if cfg[section]["type"] == "combine" {
			_, item, _ = strings.Cut(item, "=")
		}
		name, p, ok := strings.Cut(item, ":")
		if !ok || name == "" {
			return nil, invalidf("section %q option %q: %q must name a remote of this config as name:path", section, key, item)
		}
		if err := checkSectionName(name); err != nil {
			return nil, invalidf("section %q option %q: %q is not a plain rclone remote name", section, key, name)
		}
		if _, ok := cfg[name]; !ok {
			return nil, invalidf("section %q option %q: remote %q has no section in %s", section, key, name, KeyConfigData)
		}
		if _, err := cleanRemotePath(p); err != nil {
			return nil, invalidf("section %q option %q: path of %q leaves its base", section, key, name)
		}
		names = append(names, name)
	}
	if len(names) == 0 {
		return nil, invalidf("section %q option %q is empty", section, key)
	}
	return names, nil
}

// checkNoCycle refuses remotes that wrap themselves, which rclone would
// follow until it runs out of stack.
func checkNoCycle(refs map[string][]string, root string) error {
	const (
		visiting = 1
		done     = 2
	)
	state := map[string]int{}
	var visit func(string) error
	visit = func(n string) error {
		switch state[n] {
		case visiting:
			return invalidf("remote %q wraps itself", n)
		case done:
			return nil
		}
		state[n] = visiting
		for _, m := range refs[n] {
			if err := visit(m); err != nil {
				return err
			}
		}
		state[n] = done
		return nil
	}
	for _, n := range append([]string{root}, sortedKeys(refs)...) {
		if err := visit(n); err != nil {
			return err
		}
	}
	return nil
}

// optionNames maps every accepted spelling of an rclone option (snake_case
// config name, Go field name in any case) to its config name.
func optionNames(opt any) map[string]string {
	items, err := configstruct.Items(opt)
	if err != nil {
		panic(err) // rclone's own option structs: a bug, not input
	}
	names := map[string]string{}
	for _, it := range items {
		names[it.Name] = it.Name
		names[strings.ToLower(it.Field)] = it.Name
	}
	return names
}

var (
	vfsOptionNames   = optionNames(&vfscommon.Options{})
	mountOptionNames = optionNames(&mountlib.Options{})
)

func canonicalOption(names map[string]string, key, name string) (string, error) {
	if c, ok := names[name]; ok {
		return c, nil
	}
	if c, ok := names[strings.ToLower(name)]; ok {
		return c, nil
	}
	// rclone's flag spelling: --vfs-cache-mode
	if c, ok := names[strings.ReplaceAll(strings.TrimPrefix(name, "--"), "-", "_")]; ok {
		return c, nil
	}
	return "", invalidf("%s: unknown option %q", key, name)
}

func (p *Policy) checkVFSOption(name, _ string) (string, error) {
	return canonicalOption(vfsOptionNames, KeyVFSOpt, name)
}

func (p *Policy) checkMountOption(name, _ string) (string, error) {
	c, err := canonicalOption(mountOptionNames, KeyMountOpt, name)
	if err != nil {
		return "", err
	}
	if slices.Contains(deniedMountOptions, c) && !slices.Contains(p.AllowOptions, c) {
		return "", invalidf("%s: option %q is not allowed on this cluster", KeyMountOpt, name)
	}
	return c, nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
