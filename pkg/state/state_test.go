package state

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

func TestSaveLoadDelete(t *testing.T) {
	s, err := New(filepath.Join(t.TempDir(), "volumes"))
	if err != nil {
		t.Fatal(err)
	}
	v := &Volume{Phase: Staged, VolumeID: "vol/1", StagingPath: "/staging", Secret: map[string]string{"configData": "x"},
		Targets: map[string]bool{"/t1": false, "/t2": true}}
	if err := s.Save(v); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(s.path("vol/1"))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("record mode %v, %v; want 0600", fi.Mode(), err)
	}
	got, errs := s.Load()
	if len(errs) != 0 || len(got) != 1 || got[0].VolumeID != "vol/1" || !got[0].Targets["/t2"] || got[0].Version != Version {
		t.Fatalf("load: %+v %v", got, errs)
	}
	if err := s.Delete("vol/1"); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete("vol/1"); err != nil {
		t.Fatalf("second delete: %v", err)
	}
	if got, _ := s.Load(); len(got) != 0 {
		t.Fatalf("after delete: %+v", got)
	}
}

func TestLoadSkipsBadRecords(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "volumes")
	s, err := New(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Save(&Volume{Phase: Staged, VolumeID: "good", StagingPath: "/s"}); err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string]string{
		s.path("corrupt"):  "{not json",
		s.path("future"):   `{"version": 99, "volumeID": "future", "stagingPath": "/s"}`,
		s.path("misnamed"): `{"version": 1, "volumeID": "other", "stagingPath": "/s"}`,
	} {
		if err := os.WriteFile(name, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	got, errs := s.Load()
	if len(got) != 1 || got[0].VolumeID != "good" {
		t.Fatalf("good records: %+v", got)
	}
	if len(errs) != 3 {
		t.Fatalf("errors: %v", errs)
	}
	for _, err := range errs {
		var le *LoadError
		if !errors.As(err, &le) {
			t.Errorf("%v is not a LoadError", err)
		}
	}
}

// Every shape a record may have on disk loads into one that is safe to use:
// maps present, paths clean, older records taken as staged.
func TestLoadNormalises(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		want       Volume
	}{
		{"no targets, secret or context", `{"version":1,"phase":"staged","volumeID":"v","stagingPath":"/s","accessMode":1}`,
			Volume{Phase: Staged, StagingPath: "/s", AccessMode: 1}},
		{"null maps", `{"version":1,"phase":"staged","volumeID":"v","stagingPath":"/s","secret":null,"context":null,"targets":null}`,
			Volume{Phase: Staged, StagingPath: "/s"}},
		{"empty maps", `{"version":1,"phase":"staged","volumeID":"v","stagingPath":"/s","secret":{},"context":{},"targets":{}}`,
			Volume{Phase: Staged, StagingPath: "/s"}},
		{"version 0, no phase, unknown field", `{"volumeID":"v","stagingPath":"/s/","targets":{"/t/":true},"legacy":42}`,
			Volume{Phase: Staged, StagingPath: "/s", Targets: map[string]bool{"/t": true}}},
		{"unclean and relative targets", `{"version":1,"phase":"staged","volumeID":"v","stagingPath":"/a/../s","targets":{"/p//t":false,"rel":true,"":true}}`,
			Volume{Phase: Staged, StagingPath: "/s", Targets: map[string]bool{"/p/t": false}}},
		{"staging", `{"version":1,"phase":"staging","volumeID":"v","stagingPath":"/s"}`,
			Volume{Phase: Staging, StagingPath: "/s"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := New(filepath.Join(t.TempDir(), "volumes"))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(s.path("v"), []byte(tc.body), 0o600); err != nil {
				t.Fatal(err)
			}
			got, errs := s.Load()
			if len(errs) != 0 || len(got) != 1 {
				t.Fatalf("load: %+v %v", got, errs)
			}
			v := got[0]
			if v.Secret == nil || v.Context == nil || v.Targets == nil {
				t.Fatalf("a nil map is left: %+v", v)
			}
			v.Targets["/new"] = true // what NodePublishVolume does
			delete(v.Targets, "/new")
			want := tc.want
			want.Version, want.VolumeID = Version, "v"
			if want.Secret == nil {
				want.Secret = map[string]string{}
			}
			if want.Context == nil {
				want.Context = map[string]string{}
			}
			if want.Targets == nil {
				want.Targets = map[string]bool{}
			}
			if !reflect.DeepEqual(*v, want) {
				t.Fatalf("got %+v\nwant %+v", *v, want)
			}
			if err := s.Save(v); err != nil {
				t.Fatalf("saving it again: %v", err)
			}
		})
	}
}

func TestLoadRefusesUnrecoverable(t *testing.T) {
	for name, body := range map[string]string{
		"null":             `null`,
		"relative staging": `{"version":1,"volumeID":"v","stagingPath":"s"}`,
		"no staging":       `{"version":1,"volumeID":"v"}`,
		"unknown phase":    `{"version":1,"phase":"publishing","volumeID":"v","stagingPath":"/s"}`,
		"negative version": `{"version":-1,"volumeID":"v","stagingPath":"/s"}`,
	} {
		t.Run(name, func(t *testing.T) {
			s, err := New(filepath.Join(t.TempDir(), "volumes"))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(s.path("v"), []byte(body), 0o600); err != nil {
				t.Fatal(err)
			}
			if got, errs := s.Load(); len(got) != 0 || len(errs) != 1 {
				t.Fatalf("load: %+v %v; want one error", got, errs)
			}
		})
	}
}

// A record written before workers had a uid each loads with WorkerUID 0,
// and one written now keeps its uid.
func TestWorkerUID(t *testing.T) {
	s, err := New(filepath.Join(t.TempDir(), "volumes"))
	if err != nil {
		t.Fatal(err)
	}
	old := `{"version": 1, "phase": "staged", "volumeID": "old", "stagingPath": "/s"}`
	if err := os.WriteFile(s.path("old"), []byte(old), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := s.Save(&Volume{Phase: Staged, VolumeID: "new", StagingPath: "/s", WorkerUID: 2000000007}); err != nil {
		t.Fatal(err)
	}
	got, errs := s.Load()
	if len(errs) != 0 || len(got) != 2 {
		t.Fatalf("load: %+v %v", got, errs)
	}
	uids := map[string]int{}
	for _, v := range got {
		uids[v.VolumeID] = v.WorkerUID
	}
	if uids["old"] != 0 || uids["new"] != 2000000007 {
		t.Fatalf("worker uids %v", uids)
	}
}
