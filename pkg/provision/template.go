// Package provision makes a directory per PVC: it expands a StorageClass's
// subdirTemplate, encodes in the volume id what DeleteVolume needs, and runs
// the storage operations (mkdir, purge, rename) in a child process of the
// csi-rclone binary, so that tenant-written rclone config never runs in the
// controller's own process.
package provision

import (
	"errors"
	"fmt"
	"strings"

	"github.com/csi-rclone/csi-rclone/secrets"
)

// StorageClass parameters of this package.
const (
	ParamSubdirTemplate = "subdirTemplate"
	ParamOnDelete       = "onDelete"
)

// Metadata csi-provisioner passes as parameters with --extra-create-metadata.
const (
	KeyPVCName      = secrets.KeyPVCName
	KeyPVCNamespace = secrets.KeyPVCNamespace
	KeyPVName       = "csi.storage.k8s.io/pv/name"
)

// variables maps a template variable to the parameter that holds its value.
var variables = map[string]string{
	"pvc.name":      KeyPVCName,
	"pvc.namespace": KeyPVCNamespace,
	"pv.name":       KeyPVName,
}

// ErrInvalid marks a template or parameter the driver refuses.
var ErrInvalid = secrets.ErrInvalid

func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...)
}

// Expand turns tmpl into a relative directory path from the metadata in
// params. Only ${pvc.name}, ${pvc.namespace} and ${pv.name} are known; the
// result must stay under the base: no absolute path, no "." or ".."
// segment, no empty segment, no backslash or control character.
func Expand(tmpl string, params map[string]string) (string, error) {
	if strings.TrimSpace(tmpl) == "" {
		return "", invalidf("%s is empty", ParamSubdirTemplate)
	}
	var b strings.Builder
	rest := tmpl
	for {
		i := strings.IndexByte(rest, '$')
		if i < 0 {
			b.WriteString(rest)
			break
		}
		b.WriteString(rest[:i])
		rest = rest[i:]
		if !strings.HasPrefix(rest, "${") {
			return "", invalidf("%s: a $ must start a ${variable}", ParamSubdirTemplate)
		}
		end := strings.IndexByte(rest, '}')
		if end < 0 {
			return "", invalidf("%s: unclosed ${", ParamSubdirTemplate)
		}
		name := rest[2:end]
		key, ok := variables[name]
		if !ok {
			return "", invalidf("%s: unknown variable ${%s}; known: ${pvc.name}, ${pvc.namespace}, ${pv.name}", ParamSubdirTemplate, name)
		}
		value := params[key]
		if value == "" {
			return "", invalidf("%s: ${%s} has no value: csi-provisioner must run with --extra-create-metadata", ParamSubdirTemplate, name)
		}
		if strings.Contains(value, "/") {
			return "", invalidf("%s: the value of ${%s} contains a slash", ParamSubdirTemplate, name)
		}
		b.WriteString(value)
		rest = rest[end+1:]
	}
	return checkSubdir(b.String())
}

// checkSubdir refuses any path that could leave the base directory.
func checkSubdir(dir string) (string, error) {
	if strings.HasPrefix(dir, "/") {
		return "", invalidf("%s must be relative, not absolute", ParamSubdirTemplate)
	}
	for _, r := range dir {
		if r < 0x20 || r == 0x7f || r == '\\' {
			return "", invalidf("%s: the directory contains a control character or a backslash", ParamSubdirTemplate)
		}
	}
	for _, seg := range strings.Split(dir, "/") {
		switch seg {
		case "":
			return "", invalidf("%s: the directory has an empty segment", ParamSubdirTemplate)
		case ".", "..":
			return "", invalidf("%s: the directory has a %q segment", ParamSubdirTemplate, seg)
		}
	}
	return dir, nil
}

// OnDelete is what DeleteVolume does with a volume's directory.
type OnDelete string

const (
	// Retain keeps the directory and its data (the default).
	Retain OnDelete = "retain"
	// Delete removes the directory and everything in it.
	Delete OnDelete = "delete"
	// Archive renames the directory to <dir>.archived-<UTC timestamp>.
	Archive OnDelete = "archive"
)

// ParseOnDelete reads the onDelete parameter; empty means Retain.
func ParseOnDelete(s string) (OnDelete, error) {
	switch p := OnDelete(strings.TrimSpace(s)); p {
	case "":
		return Retain, nil
	case Retain, Delete, Archive:
		return p, nil
	}
	return "", invalidf("%s must be retain, delete or archive", ParamOnDelete)
}

var errNotProvisioned = errors.New("not a provisioned volume id")
