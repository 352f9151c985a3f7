// Package secrets turns what a CSI request carries (the node-stage secret and
// the volume context) into a validated description of one rclone mount.
//
// Everything here treats its input as written by an untrusted tenant: the
// result is only built when every section, option and path passed the
// Policy. Errors wrap ErrInvalid and never quote a credential.
package secrets

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"path"
	"regexp"
	"slices"
	"strings"

	"github.com/rclone/rclone/fs/fspath"
	"github.com/unknwon/goconfig"
)

// Keys understood in the node-stage secret and in the volume context.
const (
	KeyRemote           = "remote"
	KeyRemotePath       = "remotePath"
	KeyRemotePathSuffix = "remotePathSuffix"
	KeyConfigData       = "configData"
	KeyVFSOpt           = "vfsOpt"
	KeyMountOpt         = "mountOpt"
	// KeySecretKey is a Fernet key that decrypts the overrides, as Renku's
	// secrets carry it (the legacy mode; see SECURITY.md).
	KeySecretKey = "secretKey"
	// KeyCapacity is the volume's size (bytes or rclone size syntax), shown
	// as the filesystem's size; the driver reads it, rclone does not.
	KeyCapacity = "capacity"
	// Placeholder stands for a value that an override in the secret gives.
	Placeholder = "<sensitive>"
)

// reservedKeys are the keys that are not option overrides.
var reservedKeys = []string{KeyRemote, KeyRemotePath, KeyRemotePathSuffix, KeyConfigData, KeyVFSOpt, KeyMountOpt, KeySecretKey, KeyCapacity}

// ErrInvalid marks every error caused by the tenant's input.
var ErrInvalid = errors.New("invalid volume configuration")

// Config is an rclone configuration: section name → option → value.
type Config map[string]map[string]string

// Volume is everything a worker needs to mount one volume.
type Volume struct {
	// Config holds every remote section the mount may use.
	Config Config `json:"config"`
	// Remote is the section mounted, Path the path inside it.
	Remote string `json:"remote"`
	Path   string `json:"path"`
	// VFSOpt and MountOpt are rclone option names (snake_case) to values.
	VFSOpt   map[string]string `json:"vfsOpt,omitempty"`
	MountOpt map[string]string `json:"mountOpt,omitempty"`
	// Secrets are values that came encrypted or as overrides: they are
	// redacted from messages whatever option holds them.
	Secrets []string `json:"secrets,omitempty"`
}

// Redact replaces every credential of the volume found in msg.
func (v *Volume) Redact(msg string) string {
	return RedactValues(msg, append(v.Config.Sensitive(), v.Secrets...))
}

// FsString is the rclone remote string of the volume ("name:path").
func (v *Volume) FsString() string { return v.Remote + ":" + v.Path }

func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...)
}

// Parse builds a Volume from a node-stage secret and a volume context that
// hold no encrypted value (see Build).
func Parse(secret, volumeContext map[string]string, policy *Policy) (*Volume, error) {
	return Build(context.Background(), Source{Secret: secret, VolumeContext: volumeContext}, policy, nil)
}

// Source is what a CSI request gives to build a volume from.
type Source struct {
	Secret        map[string]string
	VolumeContext map[string]string
	VolumeID      string
}

// Build makes a Volume from a node-stage secret and a volume context:
//  1. read the keys; a key may be in either map, and where both have it the
//     secret wins, because the secret is what a platform writes per session;
//  2. parse configData; collect option overrides (other keys of the secret);
//  3. decrypt: legacy Fernet overrides with secretKey, and every encrypted
//     value (envelope.Marker) in one call to the secret service;
//  4. put the overrides into the mounted remote's section;
//  5. check everything against the policy.
//
// dec may be nil when no secret service is configured; an encrypted value
// is then an error. No value is ever left empty or as a placeholder.
func Build(ctx context.Context, src Source, policy *Policy, dec Decrypter) (*Volume, error) {
	if policy == nil {
		policy = &Policy{}
	}
	if err := policy.checkSizes(src); err != nil {
		return nil, err
	}
	get := func(key string) string {
		if v, ok := src.Secret[key]; ok {
			return v
		}
		return src.VolumeContext[key]
	}

	cfg, err := parseConfigData(get(KeyConfigData))
	if err != nil {
		return nil, err
	}
	remote := strings.TrimSuffix(strings.TrimSpace(get(KeyRemote)), ":")
	if remote == "" {
		return nil, invalidf("%q is required", KeyRemote)
	}
	if err := checkSectionName(remote); err != nil {
		return nil, err
	}
	if _, ok := cfg[remote]; !ok {
		return nil, invalidf("remote %q has no section in %s", remote, KeyConfigData)
	}
	overrides, err := optionOverrides(src.Secret)
	if err != nil {
		return nil, err
	}
	// Names first: nothing is sent to the secret service for a config that
	// would be refused anyway.
	if err := policy.checkNames(cfg, remote, overrides); err != nil {
		return nil, err
	}
	secretValues, err := decrypt(ctx, src, cfg, remote, overrides, dec)
	if err != nil {
		return nil, err
	}
	for key, value := range overrides {
		cfg[remote][key] = value
	}
	for name, section := range cfg {
		for key, value := range section {
			if value == Placeholder {
				return nil, invalidf("section %q option %q is %s and the secret gives no value for it", name, key, Placeholder)
			}
			if err := checkValue(name, key, value); err != nil {
				return nil, err
			}
		}
	}

	remotePath, err := cleanRemotePath(get(KeyRemotePath) + suffix(get(KeyRemotePathSuffix)))
	if err != nil {
		return nil, err
	}
	if err := policy.checkConfig(cfg, remote); err != nil {
		return nil, err
	}
	vfsOpt, err := parseOptions(KeyVFSOpt, get(KeyVFSOpt), vfsOptions, policy.checkVFSOption)
	if err != nil {
		return nil, err
	}
	mountOpt, err := parseOptions(KeyMountOpt, get(KeyMountOpt), mountOptions, policy.checkMountOption)
	if err != nil {
		return nil, err
	}
	// rclone's own default is an unbounded cache: every volume gets one.
	if _, ok := vfsOpt["vfs_cache_max_size"]; !ok {
		if vfsOpt == nil {
			vfsOpt = map[string]string{}
		}
		vfsOpt["vfs_cache_max_size"] = exactSize(policy.limits().DefaultCacheSize)
	}
	return &Volume{Config: cfg, Remote: remote, Path: remotePath, VFSOpt: vfsOpt, MountOpt: mountOpt, Secrets: secretValues}, nil
}

func suffix(s string) string {
	if s == "" {
		return ""
	}
	return "/" + s
}

// parseConfigData reads an rclone ini. Several sections are allowed (crypt or
// alias over another remote); keys outside a section are not.
func parseConfigData(data string) (Config, error) {
	if strings.TrimSpace(data) == "" {
		return nil, invalidf("%q is required", KeyConfigData)
	}
	if strings.ContainsRune(data, 0) {
		return nil, invalidf("%s contains a NUL byte", KeyConfigData)
	}
	gc, err := goconfig.LoadFromReader(bytes.NewBufferString(data))
	if err != nil {
		// goconfig's message quotes the offending line, which may hold a secret.
		return nil, invalidf("%s is not a valid rclone config", KeyConfigData)
	}
	cfg := Config{}
	for _, name := range gc.GetSectionList() {
		keys := gc.GetKeyList(name)
		if name == goconfig.DEFAULT_SECTION {
			if len(keys) > 0 {
				return nil, invalidf("%s has options outside any [section]", KeyConfigData)
			}
			continue
		}
		if err := checkSectionName(name); err != nil {
			return nil, err
		}
		section := map[string]string{}
		for _, key := range keys {
			value, err := gc.GetValue(name, key)
			if err != nil {
				return nil, invalidf("section %q option %q cannot be read", name, key)
			}
			if err := checkValue(name, key, value); err != nil {
				return nil, err
			}
			section[key] = value
		}
		cfg[name] = section
	}
	if len(cfg) == 0 {
		return nil, invalidf("%s has no [section]", KeyConfigData)
	}
	return cfg, nil
}

func checkSectionName(name string) error {
	if err := fspath.CheckConfigName(name); err != nil || strings.ContainsAny(name, ":,[]") {
		return invalidf("remote name %q is not a plain rclone remote name", name)
	}
	return nil
}

var keyName = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]*$`)

// checkValue refuses what could smuggle a new line or section into a config.
// It quotes the option name only once the name is known to be plain, and
// never the value: a malformed line may hold a credential.
func checkValue(section, key, value string) error {
	if !keyName.MatchString(key) {
		return invalidf("section %q: an option name is not valid (a line without \"=\"?)", section)
	}
	if strings.ContainsAny(value, "\r\n\x00") {
		return invalidf("section %q option %q: value contains a line break", section, key)
	}
	return nil
}

// cleanRemotePath refuses paths that climb out of their base with "..".
func cleanRemotePath(p string) (string, error) {
	if strings.ContainsAny(p, "\r\n\x00") {
		return "", invalidf("%s contains a control character", KeyRemotePath)
	}
	for _, part := range strings.Split(p, "/") {
		if part == ".." {
			return "", invalidf("%s %q leaves its base", KeyRemotePath, p)
		}
	}
	if p == "" {
		return "", nil
	}
	clean := path.Clean(p)
	if clean == "." {
		return "", nil
	}
	if strings.HasSuffix(p, "/") && clean != "/" {
		clean += "/"
	}
	return clean, nil
}

// parseOptions reads a JSON object of rclone options. Values may be JSON
// strings, numbers or booleans; names are rclone's snake_case names or the
// Go field names that rclone's rc API accepts (Renku writes these). A JSON
// number for a size means bytes, as in rclone's rc API (a bare number in
// rclone's own syntax means KiB).
func parseOptions(key, data string, opts structOptions, check func(o backendOption, value string) error) (map[string]string, error) {
	if strings.TrimSpace(data) == "" {
		return nil, nil
	}
	var raw map[string]any
	dec := json.NewDecoder(strings.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(&raw); err != nil || dec.More() || raw == nil {
		return nil, invalidf("%s is not a JSON object", key)
	}
	out := make(map[string]string, len(raw))
	for _, name := range slices.Sorted(maps.Keys(raw)) {
		o, err := opts.lookup(key, name)
		if err != nil {
			return nil, err
		}
		var value string
		switch v := raw[name].(type) {
		case string:
			value = v
		case json.Number:
			value = v.String()
			if o.kind == kindSize {
				value += "B"
			}
		case bool:
			value = fmt.Sprint(v)
		default:
			return nil, invalidf("%s option %q must be a string, number or boolean", key, name)
		}
		if strings.ContainsAny(value, "\r\n\x00") {
			return nil, invalidf("%s option %q contains a line break", key, name)
		}
		if _, dup := out[o.name]; dup {
			return nil, invalidf("%s sets option %q twice", key, o.name)
		}
		if err := check(o, value); err != nil {
			return nil, err
		}
		out[o.name] = value
	}
	return out, nil
}
