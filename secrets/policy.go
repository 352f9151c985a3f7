package secrets

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/rclone/rclone/fs"
)

// Policy says what a tenant may put in a stage secret. The zero value is the
// default: only options that rclone registers for the section's backend,
// minus those that run commands, read or write node files, or borrow the
// node's own identity; every resource bounded by the default Limits; no
// remote at a link-local or metadata address. An operator widens it with
// AllowBackends and AllowOptions and narrows it with DenyNetworks (see
// SECURITY.md).
type Policy struct {
	// AllowBackends lists denied backend types the operator allows anyway.
	AllowBackends []string
	// AllowOptions lists denied option names the operator allows anyway,
	// and denied values as "option=value".
	AllowOptions []string
	// Limits bound each volume's resources; zero fields take the defaults.
	Limits Limits
	// DenyNetworks are refused as remote addresses, beside
	// DefaultDeniedNetworks.
	DenyNetworks []netip.Prefix
}

// deniedBackends touch the node's own filesystem or memory: "memory" keeps
// every byte written in the worker's memory, which a node shares.
var deniedBackends = []string{"local", "cache", "memory"}

// deniedOptions run a command, name a node file, reach a node-local service
// or use the node's identity.
var deniedOptions = []string{
	"ssh", "set_env", "env_auth", "use_msi", "use_az", "key_use_agent", "use_kerberos",
	"profile", "config_profile", "unix_socket", "use_emulator", "service_principal_name",
	"ask_password", // reads a password from the worker's stdin, the driver's command pipe
}

// deniedOptionSuffixes and prefixes catch whole families of such options
// (md5sum_command, key_file, db_path, kerberos_ccache, unix_socket,
// msi_client_id, ...).
var (
	deniedOptionSuffixes = []string{"_command", "_file", "_path", "_ccache", "_socket"}
	deniedOptionPrefixes = []string{"msi_"}
)

// deniedValues are values of an option that borrow the node's identity or
// read its files: per backend type, option, the refused values.
var deniedValues = map[string]map[string][]string{
	"oracleobjectstorage": {"provider": {"env_auth", "user_principal_auth", "instance_principal_auth", "workload_identity_auth", "resource_principal_auth"}},
}

// credentialOptions: backends that fall back to the node's identity (the
// Google metadata server, through google.DefaultClient) when no credential of
// their own is set, and then send its token to the tenant's endpoint. One of
// the options (or option=value) listed must be set; the last ones of each
// list are denied unless an operator allows them.
var credentialOptions = map[string][]string{
	"google cloud storage": {"service_account_credentials", "token", "access_token", "anonymous=true", "service_account_file", "env_auth=true"},
	"drive":                {"service_account_credentials", "token", "service_account_file", "env_auth=true"},
	"google photos":        {"token"},
}

// hasCredential reports whether section sets one of the credentials its
// backend needs, or needs none.
func hasCredential(typ string, section map[string]string) bool {
	need, ok := credentialOptions[typ]
	if !ok {
		return true
	}
	for _, c := range need {
		name, want, isValue := strings.Cut(c, "=")
		v := strings.TrimSpace(section[name])
		if v != "" && (!isValue || strings.EqualFold(v, want)) {
			return true
		}
	}
	return false
}

// referenceOptions name other remotes, in wrapping backends (alias, crypt,
// union, combine, chunker, ...). They may only name sections of the same
// config, never a local path or an on-the-fly ":backend,opt=value:" remote.
var referenceOptions = []string{"remote", "upstreams"}

// mount options a tenant may not set: they daemonise, pass raw FUSE flags,
// map ids, or name the mount's source in mountinfo (which recovery reads).
var deniedMountOptions = []string{"daemon", "daemon_wait", "daemon_timeout", "option", "fuse_flag", "debug_fuse", "allow_non_empty", "allow_idmap", "devname"}

func (p *Policy) limits() Limits { return p.Limits.WithDefaults() }

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

func (p *Policy) valueAllowed(typ, name, value string) bool {
	if !slices.Contains(deniedValues[typ][name], strings.TrimSpace(value)) {
		return true
	}
	return slices.Contains(p.AllowOptions, name+"="+strings.TrimSpace(value))
}

// checkOption checks one key of a section of backend typ: registered by the
// backend, not of a denied family, within the limits, at no denied address.
func (p *Policy) checkOption(section, typ, key, value string) error {
	if key == "type" {
		return nil
	}
	if l := p.limits(); len(value) > l.ValueBytes {
		return invalidf("section %q: option %q is %d bytes, above the %d this cluster allows", section, key, len(value), l.ValueBytes)
	}
	o, err := p.checkName(section, typ, key)
	if err != nil {
		return err
	}
	if !p.valueAllowed(typ, key, value) {
		return invalidf("section %q: option %q may not be %q on this cluster", section, key, strings.TrimSpace(value))
	}
	if err := p.limits().checkLimit(fmt.Sprintf("section %q", section), o, value); err != nil {
		return err
	}
	return p.checkAddress(section, key, value)
}

// checkType: a section has a backend type that rclone knows and the policy
// allows.
func (p *Policy) checkType(section, typ string) error {
	switch {
	case typ == "":
		return invalidf("section %q has no type", section)
	case backendOptions(typ) == nil:
		return invalidf("section %q: unknown backend type %q", section, typ)
	case !p.backendAllowed(typ):
		return invalidf("section %q: backend type %q is not allowed on this cluster", section, typ)
	}
	return nil
}

// checkName: key is an option that backend typ registers, spelled as
// rclone spells it, and of no denied family.
func (p *Policy) checkName(section, typ, key string) (backendOption, error) {
	o, ok := backendOptions(typ)[key]
	if !ok {
		return o, invalidf("section %q: %q is not an option of backend %q (options are spelled as rclone registers them)", section, key, typ)
	}
	if !p.optionAllowed(key) {
		return o, invalidf("section %q: option %q is not allowed on this cluster", section, key)
	}
	return o, nil
}

// checkSizes bounds the request before anything is parsed: each value (the
// whole of configData aside), and the secret and volume context together.
func (p *Policy) checkSizes(src Source) error {
	l := p.limits()
	total := 0
	for _, m := range []map[string]string{src.Secret, src.VolumeContext} {
		for k, v := range m {
			total += len(k) + len(v)
			if k != KeyConfigData && len(v) > l.ValueBytes {
				return invalidf("the value of %q is %d bytes, above the %d this cluster allows", k, len(v), l.ValueBytes)
			}
		}
	}
	if total > l.SecretBytes {
		return invalidf("the stage secret and volume context are %d bytes, above the %d this cluster allows", total, l.SecretBytes)
	}
	return nil
}

// checkNames checks, before any value is decrypted, that every section has
// a known and allowed backend and that every key, and every override the
// secret gives for the mounted remote, is an allowed option of it.
func (p *Policy) checkNames(cfg Config, remote string, overrides map[string]string) error {
	for _, name := range sortedKeys(cfg) {
		typ := cfg[name]["type"]
		if err := p.checkType(name, typ); err != nil {
			return err
		}
		for _, key := range sortedKeys(cfg[name]) {
			if key == "type" {
				continue
			}
			if _, err := p.checkName(name, typ, key); err != nil {
				return err
			}
		}
	}
	typ := cfg[remote]["type"]
	for _, key := range sortedKeys(overrides) {
		if _, ok := backendOptions(typ)[key]; !ok {
			return invalidf("secret key %q is neither a known key nor an option of backend %q", key, typ)
		}
		if _, err := p.checkName(remote, typ, key); err != nil {
			return err
		}
	}
	return nil
}

// checkConfig validates every section reachable or not from root: a tenant
// could otherwise hide a denied section that another option later names.
func (p *Policy) checkConfig(cfg Config, root string) error {
	refs := map[string][]string{}
	for _, name := range sortedKeys(cfg) {
		section := cfg[name]
		typ := section["type"]
		if err := p.checkType(name, typ); err != nil {
			return err
		}
		for _, key := range sortedKeys(section) {
			if err := p.checkOption(name, typ, key, section[key]); err != nil {
				return err
			}
			if slices.Contains(referenceOptions, key) {
				names, err := referencedRemotes(cfg, name, key, section[key])
				if err != nil {
					return err
				}
				refs[name] = append(refs[name], names...)
			}
		}
		for _, o := range sortedKeys(backendOptions(typ)) {
			opt := backendOptions(typ)[o]
			if opt.required && strings.TrimSpace(section[o]) == "" {
				return invalidf("section %q: backend %q requires option %q", name, typ, o)
			}
			// What rclone uses when the key is absent is checked too: a
			// default may be a denied value or a denied address.
			if _, set := section[o]; !set && opt.def != "" {
				if !p.valueAllowed(typ, o, opt.def) {
					return invalidf("section %q: option %q must be set: its default %q is not allowed on this cluster", name, o, opt.def)
				}
				if err := p.checkAddress(name, o, opt.def); err != nil {
					return invalidf("section %q: option %q must be set: its default %q names an address this cluster refuses", name, o, opt.def)
				}
			}
		}
		if !hasCredential(typ, section) {
			return invalidf("section %q: backend %q needs one of %s: without one it would use the node's own identity", name, typ, strings.Join(credentialOptions[typ], ", "))
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

func (p *Policy) checkVFSOption(o backendOption, value string) error {
	return p.limits().checkLimit(KeyVFSOpt, o, value)
}

func (p *Policy) checkMountOption(o backendOption, value string) error {
	if slices.Contains(deniedMountOptions, o.name) && !slices.Contains(p.AllowOptions, o.name) {
		return invalidf("%s: option %q is not allowed on this cluster", KeyMountOpt, o.name)
	}
	return p.limits().checkLimit(KeyMountOpt, o, value)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// FitDefault is a default of the driver's for a vfsOpt (key KeyVFSOpt) or
// mountOpt (KeyMountOpt) option, lowered to this cluster's limit where the
// operator set one below it. Names rclone does not know pass unchanged.
func (p *Policy) FitDefault(key, name, value string) string {
	opts := vfsOptions
	if key == KeyMountOpt {
		opts = mountOptions
	}
	o, ok := opts[name]
	if !ok {
		return value
	}
	return p.limits().clamp(o, value)
}
