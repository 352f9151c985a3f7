package cluster

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// readTar maps each entry's name to its header and content.
func readTar(t *testing.T, data []byte) (map[string]*tar.Header, map[string][]byte) {
	t.Helper()
	hdrs, files := map[string]*tar.Header{}, map[string][]byte{}
	tr := tar.NewReader(bytes.NewReader(data))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return hdrs, files
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(tr)
		hdrs[h.Name], files[h.Name] = h, b
	}
}

// The archive is what "ctr images import" reads: a manifest naming the
// config and the layer, the layer's digest in the config's diff_ids.
func TestImageArchive(t *testing.T) {
	src := filepath.Join(t.TempDir(), "bin")
	if err := os.WriteFile(src, []byte("binary"), 0o700); err != nil {
		t.Fatal(err)
	}
	im := Image{Ref: "csi-rclone.test/x:1", Entrypoint: []string{"/usr/bin/x"}, Files: []File{
		{Path: "usr/bin/x", Src: src, Mode: 0o755 | fs.ModeSetuid},
		{Path: "/etc/conf", Data: []byte("user_allow_other\n")},
		{Path: "bin", Link: "usr/bin"},
		{Path: "tmp", Dir: true, Mode: 0o777 | fs.ModeSticky},
	}}
	out := filepath.Join(t.TempDir(), "im.tar")
	if err := im.archive(out); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	_, files := readTar(t, data)
	var manifest []struct {
		Config   string
		RepoTags []string
		Layers   []string
	}
	if err := json.Unmarshal(files["manifest.json"], &manifest); err != nil || len(manifest) != 1 || len(manifest[0].Layers) != 1 {
		t.Fatalf("manifest %s: %v", files["manifest.json"], err)
	}
	if manifest[0].RepoTags[0] != im.Ref {
		t.Errorf("tags %v", manifest[0].RepoTags)
	}
	var config struct {
		RootFS struct {
			DiffIDs []string `json:"diff_ids"`
		} `json:"rootfs"`
		Config struct{ Entrypoint []string }
	}
	if err := json.Unmarshal(files[manifest[0].Config], &config); err != nil {
		t.Fatal(err)
	}
	layer := files[manifest[0].Layers[0]]
	sum := sha256.Sum256(layer)
	if want := "sha256:" + hex.EncodeToString(sum[:]); len(config.RootFS.DiffIDs) != 1 || config.RootFS.DiffIDs[0] != want {
		t.Errorf("diff_ids %v, want [%s]", config.RootFS.DiffIDs, want)
	}
	if len(config.Config.Entrypoint) != 1 || config.Config.Entrypoint[0] != "/usr/bin/x" {
		t.Errorf("entrypoint %v", config.Config.Entrypoint)
	}

	hdrs, content := readTar(t, layer)
	for _, tc := range []struct {
		name     string
		typ      byte
		mode     int64
		content  string
		linkname string
	}{
		{"usr/", tar.TypeDir, 0o755, "", ""},
		{"usr/bin/", tar.TypeDir, 0o755, "", ""},
		{"usr/bin/x", tar.TypeReg, 0o4755, "binary", ""},
		{"etc/conf", tar.TypeReg, 0o644, "user_allow_other\n", ""},
		{"bin", tar.TypeSymlink, 0o777, "", "usr/bin"},
		{"tmp/", tar.TypeDir, 0o1777, "", ""},
	} {
		h := hdrs[tc.name]
		if h == nil {
			t.Errorf("%s not in the layer", tc.name)
			continue
		}
		if h.Typeflag != tc.typ || h.Mode != tc.mode || string(content[tc.name]) != tc.content || h.Linkname != tc.linkname || h.Uid != 0 || h.Gid != 0 {
			t.Errorf("%s: type %c mode %o uid %d link %q content %q", tc.name, h.Typeflag, h.Mode, h.Uid, h.Linkname, content[tc.name])
		}
	}
}

func TestUnescapeMount(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"/tmp/a", "/tmp/a"},
		{`/tmp/a\040b`, "/tmp/a b"},
		{`/tmp/tab\011x\134`, "/tmp/tab\tx\\"},
	} {
		if got := unescapeMount(tc.in); got != tc.want {
			t.Errorf("unescapeMount(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
