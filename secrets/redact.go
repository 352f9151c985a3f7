package secrets

import (
	"slices"
	"strings"

	"github.com/rclone/rclone/fs"
)

// Redacted replaces a credential in a message.
const Redacted = "***"

// sensitiveWords catch options that rclone does not flag but that hold
// credentials anyway (a backend added later, a misspelt option).
var sensitiveWords = []string{"pass", "secret", "token", "key", "credential", "auth"}

// Sensitive lists the values of options that hold credentials: those rclone
// flags as passwords or sensitive, and any whose name says so.
func (c Config) Sensitive() []string {
	var out []string
	for _, section := range c {
		var opts fs.Options
		if info, err := fs.Find(section["type"]); err == nil {
			opts = info.Options
		}
		for key, value := range section {
			if value == "" || key == "type" || !isSensitive(opts, key) {
				continue
			}
			out = append(out, value)
		}
	}
	return out
}

func isSensitive(opts fs.Options, key string) bool {
	for _, o := range opts {
		if o.Name == key && (o.IsPassword || o.Sensitive) {
			return true
		}
	}
	for _, w := range sensitiveWords {
		if strings.Contains(key, w) {
			return true
		}
	}
	return false
}

// Redact replaces every credential of the config found in msg.
func (c Config) Redact(msg string) string {
	return RedactValues(msg, c.Sensitive())
}

// RedactValues replaces each of values found in msg, longest first, so that
// a secret that contains another is replaced whole.
func RedactValues(msg string, values []string) string {
	values = slices.Clone(values)
	slices.SortFunc(values, func(a, b string) int { return len(b) - len(a) })
	for _, v := range values {
		if len(v) >= 3 {
			msg = strings.ReplaceAll(msg, v, Redacted)
		}
	}
	return msg
}
