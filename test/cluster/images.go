package cluster

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strings"
)

// Image is a one-layer image made of files, without a Docker engine.
type Image struct {
	Ref        string // e.g. csi-rclone.test/csi-rclone:1
	Entrypoint []string
	Cmd        []string
	Files      []File
}

// File is one entry of the image's root filesystem.
type File struct {
	Path string      // in the image, no leading slash
	Src  string      // a host file to copy; or
	Data []byte      // the content; or
	Link string      // a symlink's target; or none of them: a directory
	Mode fs.FileMode // permission bits (and setuid); 0: from Src, or 0644/0755
	Dir  bool
}

// archive writes im as a docker-archive tar (a manifest, a config and one
// layer), the format "ctr images import" reads.
func (im Image) archive(out string) error {
	layer, err := im.layer()
	if err != nil {
		return err
	}
	layerSum := sha256.Sum256(layer)
	layerID := hex.EncodeToString(layerSum[:])
	config, err := json.Marshal(map[string]any{
		"architecture": "amd64",
		"os":           "linux",
		"config": map[string]any{
			"Entrypoint": im.Entrypoint,
			"Cmd":        im.Cmd,
			"Env":        []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
		},
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{"sha256:" + layerID}},
	})
	if err != nil {
		return err
	}
	configSum := sha256.Sum256(config)
	configName := hex.EncodeToString(configSum[:]) + ".json"
	manifest, err := json.Marshal([]map[string]any{{
		"Config":   configName,
		"RepoTags": []string{im.Ref},
		"Layers":   []string{layerID + "/layer.tar"},
	}})
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range []struct {
		name string
		data []byte
	}{{layerID + "/layer.tar", layer}, {configName, config}, {"manifest.json", manifest}} {
		if err := tw.WriteHeader(&tar.Header{Name: e.name, Mode: 0o644, Size: int64(len(e.data)), Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		if _, err := tw.Write(e.data); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return os.WriteFile(out, buf.Bytes(), 0o644)
}

// layer is the root filesystem as a tar, every file owned by root, parent
// directories added.
func (im Image) layer() ([]byte, error) {
	entries := map[string]File{}
	for _, f := range im.Files {
		p := strings.TrimPrefix(path.Clean("/"+f.Path), "/")
		entries[p] = f
		for d := path.Dir(p); d != "." && d != "/"; d = path.Dir(d) {
			if _, ok := entries[d]; !ok {
				entries[d] = File{Path: d, Dir: true}
			}
		}
	}
	names := make([]string, 0, len(entries))
	for n := range entries {
		names = append(names, n)
	}
	sort.Strings(names)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, n := range names {
		f := entries[n]
		h := &tar.Header{Name: n, Uname: "root", Gname: "root", Format: tar.FormatPAX}
		switch {
		case f.Link != "":
			h.Typeflag, h.Linkname, h.Mode = tar.TypeSymlink, f.Link, 0o777
		case f.Dir:
			h.Typeflag, h.Name, h.Mode = tar.TypeDir, n+"/", 0o755
			if f.Mode != 0 {
				h.Mode = int64(f.Mode.Perm())
			}
			if f.Mode&fs.ModeSticky != 0 {
				h.Mode |= 0o1000
			}
		default:
			data, mode := f.Data, f.Mode
			if f.Src != "" {
				var err error
				if data, err = os.ReadFile(f.Src); err != nil {
					return nil, err
				}
				if mode == 0 {
					fi, err := os.Stat(f.Src)
					if err != nil {
						return nil, err
					}
					mode = fi.Mode()
				}
			}
			if mode == 0 {
				mode = 0o644
			}
			perm := int64(mode.Perm())
			if mode&fs.ModeSetuid != 0 {
				perm |= 0o4000
			}
			h.Typeflag, h.Mode, h.Size = tar.TypeReg, perm, int64(len(data))
			if err := tw.WriteHeader(h); err != nil {
				return nil, err
			}
			if _, err := tw.Write(data); err != nil {
				return nil, err
			}
			continue
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// LoadImages imports images into containerd's k8s.io namespace, where the
// kubelet finds them (pods use imagePullPolicy: Never).
func (c *Cluster) LoadImages(ctx context.Context, images ...Image) error {
	if err := os.MkdirAll(c.Path("images"), 0o755); err != nil {
		return err
	}
	for _, im := range images {
		out := c.Path("images", strings.NewReplacer("/", "_", ":", "_").Replace(im.Ref)+".tar")
		if err := im.archive(out); err != nil {
			return fmt.Errorf("image %s: %w", im.Ref, err)
		}
		if err := run(exec.CommandContext(ctx, "ctr", "--address", c.Path("containerd", "containerd.sock"), "-n", "k8s.io", "images", "import", out)); err != nil {
			return fmt.Errorf("importing %s: %w", im.Ref, err)
		}
		c.opts.Logf("imported image %s", im.Ref)
	}
	return nil
}

// usrMerged are Debian 12's top-level symlinks into /usr.
var usrMerged = []File{
	{Path: "bin", Link: "usr/bin"}, {Path: "sbin", Link: "usr/sbin"},
	{Path: "lib", Link: "usr/lib"}, {Path: "lib64", Link: "usr/lib64"},
}

var baseFiles = []File{
	{Path: "tmp", Dir: true, Mode: 0o777 | fs.ModeSticky},
	{Path: "etc/passwd", Data: []byte("root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n")},
	{Path: "etc/group", Data: []byte("root:x:0:\nnogroup:x:65534:\n")},
	{Path: "proc", Dir: true}, {Path: "sys", Dir: true}, {Path: "dev", Dir: true},
}

// PauseImageFiles is the sandbox image; built by BuildPause.
var PauseImageFiles Image

// BuildPause builds the pause binary into dir and sets PauseImageFiles.
func BuildPause(ctx context.Context, dir string) error {
	bin := filepath.Join(dir, "pause")
	if err := goBuild(ctx, filepath.Join(sourceDir(), "pause"), bin, ".", "-s -w"); err != nil {
		return err
	}
	PauseImageFiles = Image{Ref: PauseImage, Entrypoint: []string{"/pause"}, Files: []File{{Path: "pause", Src: bin, Mode: 0o755}}}
	return nil
}

// BusyboxImage is a shell image for test pods, from Debian's busybox-static.
func BusyboxImage(ref string) (Image, error) {
	out, err := exec.Command("/bin/busybox", "--list").Output()
	if err != nil {
		return Image{}, fmt.Errorf("busybox (Debian busybox-static): %w", err)
	}
	files := append([]File{{Path: "bin/busybox", Src: "/bin/busybox", Mode: 0o755}}, baseFiles...)
	for _, applet := range strings.Fields(string(out)) {
		if applet != "busybox" {
			files = append(files, File{Path: "bin/" + applet, Link: "busybox"})
		}
	}
	files = append(files, File{Path: "etc/passwd", Data: []byte("root:x:0:0:root:/root:/bin/sh\nuser:x:1000:1000:user:/tmp:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n")})
	return Image{Ref: ref, Entrypoint: []string{"/bin/sh"}, Files: files}, nil
}

// DriverImage is the driver's image with the content the Dockerfile's
// default target describes (Debian 12 with ca-certificates and the static
// csi-rclone binary), from the host's own Debian 12 files rather than
// debootstrap: the binary built here with the Dockerfile's flags (but
// -trimpath, see goBuildShared), and
// ca-certificates' bundle. Left out of bookworm-slim: what the driver never
// runs (apt, a shell, coreutils). No fuse3: the driver mounts FUSE itself.
func DriverImage(ctx context.Context, dir, ref, version string) (Image, error) {
	bin := filepath.Join(dir, "csi-rclone-"+strings.NewReplacer("/", "_", ":", "_").Replace(version))
	if err := goBuildShared(ctx, RepoRoot(), bin, "./cmd/csi-rclone", "-s -w -X main.version="+version, "GOFLAGS=-buildvcs=false"); err != nil {
		return Image{}, err
	}
	files := append(append([]File{}, usrMerged...), baseFiles...)
	files = append(files,
		File{Path: "usr/local/bin/csi-rclone", Src: bin, Mode: 0o755},
		File{Path: "etc/ssl/certs/ca-certificates.crt", Src: "/etc/ssl/certs/ca-certificates.crt", Mode: 0o644},
		File{Path: "etc/mtab", Link: "../proc/self/mounts"},
		File{Path: "var/lib", Dir: true},
		File{Path: "run", Dir: true},
	)
	return Image{Ref: ref, Entrypoint: []string{"/usr/local/bin/csi-rclone"}, Files: files}, nil
}

// ProvisionerImage is csi-provisioner's image: its static binary (built by
// Build) and the CA bundle.
func ProvisionerImage(b Binaries, ref string) Image {
	files := append([]File{
		{Path: "csi-provisioner", Src: b.Provisioner, Mode: 0o755},
		{Path: "etc/ssl/certs/ca-certificates.crt", Src: "/etc/ssl/certs/ca-certificates.crt", Mode: 0o644},
	}, baseFiles...)
	return Image{Ref: ref, Entrypoint: []string{"/csi-provisioner"}, Files: files}
}

// SecretServiceImage is the reference secret service's image, as the
// Dockerfile's secret-service target: the static binary and the CA bundle,
// run as 65532.
func SecretServiceImage(ctx context.Context, dir, ref, version string) (Image, error) {
	bin := filepath.Join(dir, "secret-service-"+strings.NewReplacer("/", "_", ":", "_").Replace(version))
	if err := goBuildShared(ctx, RepoRoot(), bin, "./cmd/secret-service", "-s -w -X main.version="+version, "GOFLAGS=-buildvcs=false"); err != nil {
		return Image{}, err
	}
	files := append([]File{
		{Path: "usr/local/bin/secret-service", Src: bin, Mode: 0o755},
		{Path: "etc/ssl/certs/ca-certificates.crt", Src: "/etc/ssl/certs/ca-certificates.crt", Mode: 0o644},
	}, baseFiles...)
	return Image{Ref: ref, Entrypoint: []string{"/usr/local/bin/secret-service"}, Cmd: []string{"serve"}, Files: files}, nil
}
