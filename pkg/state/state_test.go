package state

import (
	"errors"
	"os"
	"path/filepath"
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
