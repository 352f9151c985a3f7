package secrets

import (
	"strings"
	"sync"

	"github.com/rclone/rclone/cmd/mountlib"
	"github.com/rclone/rclone/fs"
	"github.com/rclone/rclone/fs/config/configstruct"
	"github.com/rclone/rclone/vfs/vfscommon"

	_ "github.com/rclone/rclone/backend/all" // the registry that types and options are checked against
)

// The allowlist is rclone's own registry: a key of a section is accepted only
// if it is "type" or an option that the section's backend registers, spelled
// as rclone spells it. rclone also reads keys it does not register (the
// "global.<flag>" and "override.<flag>" keys of fs/newfs.go, which set any
// global flag from inside a section); naming what is accepted, rather than
// what is refused, closes those and whatever a later rclone adds.

// backendOption is what the policy needs of one registered option.
type backendOption struct {
	name     string
	required bool   // registered as Required with no default
	def      string // the registered default, as rclone would read it
	kind     optionKind
}

// optionKind says how a value is parsed to check it against a limit.
type optionKind int

const (
	kindOther optionKind = iota
	kindSize             // fs.SizeSuffix: "128M", "off"
	kindInt
	kindDuration // fs.Duration: "5m", "off"
)

func kindOfValue(v any) optionKind {
	switch v.(type) {
	case fs.SizeSuffix:
		return kindSize
	case fs.Duration:
		return kindDuration
	case int, int64, int32, uint32:
		return kindInt
	}
	return kindOther
}

var (
	registryOnce sync.Once
	registry     map[string]map[string]backendOption // backend type → option name → option
)

// backendOptions returns the options that backend typ registers, or nil for
// an unknown type.
func backendOptions(typ string) map[string]backendOption {
	registryOnce.Do(func() {
		registry = map[string]map[string]backendOption{}
		for _, ri := range fs.Registry {
			opts := map[string]backendOption{}
			for _, o := range ri.Options {
				// One name may be registered several times (per provider);
				// it is required only if every registration says so.
				prev, seen := opts[o.Name]
				// "remote" of a wrapping backend is required whatever the
				// registry says: archive without one reads its root path
				// as a remote, so a remotePath could name :local: or a
				// connection string.
				required := o.Required && isZero(o.Default) || o.Name == "remote"
				if seen {
					required = required && prev.required
				}
				def := ""
				if d, ok := o.Default.(string); ok {
					def = d
				}
				opts[o.Name] = backendOption{name: o.Name, required: required, def: def, kind: kindOfValue(o.Default)}
			}
			registry[ri.Name] = opts
		}
	})
	return registry[typ]
}

func isZero(v any) bool {
	switch d := v.(type) {
	case nil:
		return true
	case string:
		return d == ""
	}
	return false
}

// structOptions maps the accepted spellings of the options of one of
// rclone's option structs (the VFS and mount options) to their config names:
// the snake_case config name, and the Go field name that rclone's rc API and
// Renku use. Both exactly as rclone spells them; nothing else.
type structOptions map[string]backendOption

func newStructOptions(opt any) structOptions {
	items, err := configstruct.Items(opt)
	if err != nil {
		panic(err) // rclone's own option structs: a bug, not input
	}
	names := structOptions{}
	for _, it := range items {
		o := backendOption{name: it.Name, kind: kindOfValue(it.Value)}
		names[it.Name] = o
		names[it.Field] = o
	}
	return names
}

var (
	vfsOptions   = newStructOptions(&vfscommon.Options{})
	mountOptions = newStructOptions(&mountlib.Options{})
)

// lookup finds name, spelled exactly, or says which spelling rclone uses
// when only the case (or flag form) differs: a helpful error, not a match.
func (s structOptions) lookup(key, name string) (backendOption, error) {
	if o, ok := s[name]; ok {
		return o, nil
	}
	folded := strings.ReplaceAll(strings.TrimLeft(strings.ToLower(name), "-"), "-", "_")
	for spelling, o := range s {
		if strings.ToLower(spelling) == folded {
			return backendOption{}, invalidf("%s: unknown option %q (rclone spells it %q)", key, name, o.name)
		}
	}
	return backendOption{}, invalidf("%s: unknown option %q", key, name)
}
