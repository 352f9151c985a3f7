package provision

import (
	"errors"
	"strings"
	"testing"
	"time"
)

var md = map[string]string{
	KeyPVCName:      "data",
	KeyPVCNamespace: "alice",
	KeyPVName:       "pvc-0b1c",
}

func TestExpand(t *testing.T) {
	for _, tc := range []struct {
		tmpl, want string
		params     map[string]string
		refused    string // part of the error, "" when accepted
	}{
		{tmpl: "${pvc.namespace}/${pvc.name}", want: "alice/data"},
		{tmpl: "${pv.name}", want: "pvc-0b1c"},
		{tmpl: "homes/${pvc.namespace}-${pvc.name}.d", want: "homes/alice-data.d"},
		{tmpl: "fixed", want: "fixed"},
		{tmpl: "", refused: "empty"},
		{tmpl: "  ", refused: "empty"},
		{tmpl: "/${pvc.name}", refused: "absolute"},
		{tmpl: "../${pvc.name}", refused: `".." segment`},
		{tmpl: "a/../../b", refused: `".." segment`},
		{tmpl: "${pvc.namespace}/..", refused: `".." segment`},
		{tmpl: "./${pvc.name}", refused: `"." segment`},
		{tmpl: "${pvc.namespace}//${pvc.name}", refused: "empty segment"},
		{tmpl: "${pvc.name}/", refused: "empty segment"},
		{tmpl: "${pvc.annotations['x']}", refused: "unknown variable"},
		{tmpl: "${PVC.NAME}", refused: "unknown variable"},
		{tmpl: "${env.HOME}", refused: "unknown variable"},
		{tmpl: "${pvc.name", refused: "unclosed"},
		{tmpl: "$HOME", refused: "a $ must start"},
		{tmpl: "a\\b", refused: "backslash"},
		{tmpl: "a\nb", refused: "control character"},
		{tmpl: "${pvc.name}", params: map[string]string{}, refused: "--extra-create-metadata"},
		{tmpl: "${pvc.name}", params: map[string]string{KeyPVCName: ".."}, refused: `".." segment`},
		{tmpl: "x/${pvc.name}", params: map[string]string{KeyPVCName: "a/../../b"}, refused: "slash"},
	} {
		t.Run(tc.tmpl, func(t *testing.T) {
			params := tc.params
			if params == nil {
				params = md
			}
			got, err := Expand(tc.tmpl, params)
			if tc.refused != "" {
				if err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.refused) {
					t.Fatalf("Expand(%q) = %q, %v; want an invalid error containing %q", tc.tmpl, got, err, tc.refused)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("Expand(%q) = %q, %v; want %q", tc.tmpl, got, err, tc.want)
			}
		})
	}
}

func TestParseOnDelete(t *testing.T) {
	for in, want := range map[string]OnDelete{"": Retain, "retain": Retain, "delete": Delete, "archive": Archive, " delete ": Delete} {
		if got, err := ParseOnDelete(in); err != nil || got != want {
			t.Errorf("ParseOnDelete(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"Delete", "purge", "keep"} {
		if _, err := ParseOnDelete(in); !errors.Is(err, ErrInvalid) {
			t.Errorf("ParseOnDelete(%q) = %v; want invalid", in, err)
		}
	}
}

func TestVolumeID(t *testing.T) {
	v := Volume{Name: "pvc-1", Remote: "store", Base: "bucket/team", Subdir: "alice/data", OnDelete: Archive, PVCNamespace: "alice", PVCName: "data"}
	id := v.ID()
	if !IsProvisionedID(id) || id != v.ID() {
		t.Fatalf("id %q is not stable or not marked", id)
	}
	got, err := ParseID(id)
	if err != nil || *got != v {
		t.Fatalf("ParseID = %+v, %v; want %+v", got, err, v)
	}
	if got.Path() != "bucket/team/alice/data" {
		t.Errorf("Path = %q", got.Path())
	}

	forged := func(v Volume) string { return v.ID() }
	for name, id := range map[string]string{
		"plain name":     "pvc-1",
		"not base64":     idPrefix + "!!",
		"not json":       idPrefix + "bm90IGpzb24",
		"escaping dir":   forged(Volume{Name: "n", Remote: "r", Subdir: "../other"}),
		"absolute dir":   forged(Volume{Name: "n", Remote: "r", Subdir: "/etc"}),
		"empty dir":      forged(Volume{Name: "n", Remote: "r"}),
		"no remote":      forged(Volume{Name: "n", Subdir: "d"}),
		"unknown policy": forged(Volume{Name: "n", Remote: "r", Subdir: "d", OnDelete: "shred"}),
	} {
		if _, err := ParseID(id); err == nil {
			t.Errorf("%s: ParseID(%q) accepted", name, id)
		}
	}
}

func TestArchiveName(t *testing.T) {
	at := time.Date(2026, 12, 1, 10, 5, 3, 0, time.FixedZone("x", 3600))
	if got := ArchiveName("alice/data", at); got != "alice/data.archived-20261201T090503Z" {
		t.Errorf("ArchiveName = %q", got)
	}
}
