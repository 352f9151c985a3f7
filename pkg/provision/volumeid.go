package provision

import (
	"encoding/base64"
	"encoding/json"
	"path"
	"strings"
)

// idPrefix marks a volume id that carries a provisioned directory; other
// ids (whole-remote volumes) are plain names.
const idPrefix = "dir1."

// Volume is what DeleteVolume needs to find and treat a volume's directory.
// It lives in the volume id, so that any controller instance, started at any
// time, deletes what another one created: nothing is kept in memory.
type Volume struct {
	// Name is CreateVolume's name: two PVs of one directory keep two ids.
	Name string `json:"n"`
	// Remote is the rclone section, Base the path in it that holds Subdir.
	Remote string `json:"r"`
	Base   string `json:"b,omitempty"`
	Subdir string `json:"s"`
	// OnDelete is the StorageClass's policy at creation.
	OnDelete OnDelete `json:"d"`
	// PVCNamespace and PVCName bind decryption as at creation.
	PVCNamespace string `json:"ns,omitempty"`
	PVCName      string `json:"pvc,omitempty"`
}

// Path is the directory's path in the remote.
func (v *Volume) Path() string {
	if v.Base == "" {
		return v.Subdir
	}
	return path.Join(v.Base, v.Subdir)
}

// ID encodes v as a volume id.
func (v *Volume) ID() string {
	b, _ := json.Marshal(v) // strings only: cannot fail
	return idPrefix + base64.RawURLEncoding.EncodeToString(b)
}

// IsProvisionedID reports whether id was made by Volume.ID.
func IsProvisionedID(id string) bool { return strings.HasPrefix(id, idPrefix) }

// ParseID decodes a volume id made by Volume.ID and checks it as
// CreateVolume checked the parameters: an id is input too.
func ParseID(id string) (*Volume, error) {
	enc, ok := strings.CutPrefix(id, idPrefix)
	if !ok {
		return nil, errNotProvisioned
	}
	b, err := base64.RawURLEncoding.DecodeString(enc)
	if err != nil {
		return nil, invalidf("volume id is not valid base64")
	}
	var v Volume
	if err := json.Unmarshal(b, &v); err != nil {
		return nil, invalidf("volume id does not decode")
	}
	if v.Name == "" || v.Remote == "" {
		return nil, invalidf("volume id lacks a name or remote")
	}
	if _, err := checkSubdir(v.Subdir); err != nil {
		return nil, err
	}
	if v.OnDelete, err = ParseOnDelete(string(v.OnDelete)); err != nil {
		return nil, err
	}
	return &v, nil
}
