// Package state is the node plugin's recovery record: for each staged volume,
// what it needs to stage it again after a restart (the stage request as it
// arrived, encrypted values still encrypted) and where it is published.
//
// One file per volume, so that a corrupt file costs one volume only; written
// atomically (temporary file, fsync, rename) with mode 0600 in a directory
// that should be memory-backed (/run): a record holds credentials, and must
// not outlive a node reboot, after which the kubelet stages everything anew.
package state

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Version of the record format. A record of a later version is skipped; one
// of version 0 (no version field) is read as this version.
const Version = 1

// Phase of a volume's life on the node.
type Phase string

const (
	// Staging: NodeStageVolume has started but not finished. A record found
	// in this phase after a restart is a half-done stage, cleaned up, never
	// recovered: the kubelet retries the stage.
	Staging Phase = "staging"
	// Staged: the volume is mounted and must be mounted again on recovery.
	Staged Phase = "staged"
)

// Volume is the record of one volume.
type Volume struct {
	Version     int               `json:"version"`
	Phase       Phase             `json:"phase"`
	VolumeID    string            `json:"volumeID"`
	StagingPath string            `json:"stagingPath"`
	AccessMode  int32             `json:"accessMode"`
	MountGroup  string            `json:"mountGroup,omitempty"`
	Secret      map[string]string `json:"secret,omitempty"`
	Context     map[string]string `json:"context,omitempty"`
	// Targets maps each published target path to its read-only flag.
	Targets map[string]bool `json:"targets,omitempty"`
	// Pods maps a target to the pod it was published for, as far as the
	// kubelet said (the uid from the path, the name and namespace with
	// podInfoOnMount): recovery tells them with Events.
	Pods map[string]Pod `json:"pods,omitempty"`
	// WorkerUID is the uid (and gid) the volume's mount worker runs as, and
	// that owns its cache dir: recovery keeps it. 0 in records written
	// before workers had a uid each; the driver then allocates one.
	WorkerUID int `json:"workerUID,omitempty"`
}

// Pod is a pod a volume is published for.
type Pod struct {
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name,omitempty"`
	UID       string `json:"uid,omitempty"`
}

// Store keeps records in a directory.
type Store struct{ dir string }

// New opens (creating, 0700) the record directory.
func New(dir string) (*Store, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return nil, err
	}
	return &Store{dir: dir}, nil
}

func (s *Store) path(volumeID string) string {
	return filepath.Join(s.dir, FileName(volumeID))
}

// FileName is the name of a volume's record file in the store's directory:
// fixed length, whatever characters the id holds.
func FileName(volumeID string) string {
	sum := sha256.Sum256([]byte(volumeID))
	return hex.EncodeToString(sum[:16]) + ".json"
}

// Save writes v atomically.
func (s *Store) Save(v *Volume) error {
	v.Version = Version
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(s.dir, ".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // a no-op after the rename
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), s.path(v.VolumeID))
}

// Delete removes the record of a volume; a missing one is no error.
func (s *Store) Delete(volumeID string) error {
	if err := os.Remove(s.path(volumeID)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// LoadError is a record that could not be read; it is reported and skipped.
type LoadError struct {
	File string
	Err  error
}

func (e *LoadError) Error() string { return fmt.Sprintf("record %s: %v", e.File, e.Err) }
func (e *LoadError) Unwrap() error { return e.Err }

// normalise makes a record read from disk safe to use whatever its shape:
// every map present (the JSON omits empty ones), paths clean, and a record of
// version 0 (written before records had a version or a phase) taken as a
// staged volume of this version. It refuses what cannot be recovered.
func (v *Volume) normalise() error {
	switch {
	case v.Version > Version || v.Version < 0:
		return fmt.Errorf("format version %d, this driver reads up to %d", v.Version, Version)
	case v.VolumeID == "" || !filepath.IsAbs(v.StagingPath):
		return errors.New("incomplete: no volume id or no absolute staging path")
	}
	switch v.Phase {
	case Staging, Staged:
	case "":
		v.Phase = Staged
	default:
		return fmt.Errorf("unknown phase %q", v.Phase)
	}
	v.Version = Version
	v.StagingPath = filepath.Clean(v.StagingPath)
	if v.Secret == nil {
		v.Secret = map[string]string{}
	}
	if v.Context == nil {
		v.Context = map[string]string{}
	}
	targets := make(map[string]bool, len(v.Targets))
	for t, ro := range v.Targets {
		if filepath.IsAbs(t) { // a relative one cannot be ours: drop it
			targets[filepath.Clean(t)] = ro
		}
	}
	v.Targets = targets
	if v.WorkerUID < 0 { // not a uid: the driver allocates one
		v.WorkerUID = 0
	}
	return nil
}

// Load reads every record, normalised. Records that cannot be read, or are
// of a later version, come back as errors beside the good ones, never
// instead of them.
func (s *Store) Load() ([]*Volume, []error) {
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, []error{err}
	}
	var vols []*Volume
	var errs []error
	for _, e := range entries {
		name := e.Name()
		if !strings.HasSuffix(name, ".json") || strings.HasPrefix(name, ".") {
			continue
		}
		file := filepath.Join(s.dir, name)
		data, err := os.ReadFile(file)
		if err != nil {
			errs = append(errs, &LoadError{file, err})
			continue
		}
		var v Volume
		if err := json.Unmarshal(data, &v); err != nil {
			errs = append(errs, &LoadError{file, fmt.Errorf("corrupt: %w", err)})
			continue
		}
		if err := v.normalise(); err != nil {
			errs = append(errs, &LoadError{file, err})
			continue
		}
		if s.path(v.VolumeID) != file {
			errs = append(errs, &LoadError{file, errors.New("misnamed")})
			continue
		}
		vols = append(vols, &v)
	}
	sort.Slice(vols, func(i, j int) bool { return vols[i].VolumeID < vols[j].VolumeID })
	return vols, errs
}
