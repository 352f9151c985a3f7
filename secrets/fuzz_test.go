package secrets

import (
	"errors"
	"strings"
	"testing"
)

// FuzzParse checks what Parse promises whatever the tenant writes: no panic,
// errors that wrap ErrInvalid, and on success a config that holds only
// option names rclone registers for each section's backend, and cannot
// smuggle a line, a denied backend or a path out of its base.
func FuzzParse(f *testing.F) {
	crypt := s3Conf + "[enc]\ntype = crypt\nremote = s3remote:bucket/enc\npassword = p\n"
	for _, s := range [][5]string{
		{s3Conf, "s3remote", "bucket/prefix", "", ""},
		{crypt, "enc:", "", `{"CacheMode":"full","ReadOnly":true}`, `{"AllowOther":true}`},
		{s3Conf + "[u]\ntype = union\nupstreams = s3remote:a s3remote:b:ro\n", "u", "x/./y/", `{"--vfs-cache-mode":"writes"}`, ""},
		{s3Conf + "[a]\ntype = alias\nremote = b:\n[b]\ntype = alias\nremote = a:\n", "a", "", "", ""},
		{"[s3remote]\ntype = s3\nendpoint = x\n[evil]\ntype = local\n", "s3remote", "", "", ""},
		{"[s3remote]\ntype = s3\nendpoint = `x\n[evil]\ntype = local`\n", "s3remote", "", "", ""},
		{"[s3remote]\ntype = s3\nendpoint = \"\"\"x\r[evil]\"\"\"\n", "s3remote", "", "", ""},
		{s3Conf, "s3remote\n[evil]", "x\n[evil]\ntype = local", `{"vfs_cache_mode":"x\n[evil]\ntype = local"}`, `{"daemon":true}`},
		{s3Conf, "s3remote,env_auth=true", "../..", `[]`, `{"option":"x"}`},
		{s3Conf + "[a]\ntype = alias\nremote = :local:/etc\n", "a", "", "", ""},
		{s3Conf + "[c]\ntype = combine\nupstreams = d=s3remote:x e=:local,description=s3remote:/\n", "c", "", "", ""},
		{"x = y\n" + s3Conf, "s3remote", "", "", ""},
		{"[DEFAULT]\ntype = local\n" + s3Conf, "s3remote", "", "", ""},
		{s3Conf + "endpoint = %(secret_access_key)s\n", "s3remote", "a/b/../c", "null", "{}"},
		{s3Conf + "global.metadata_mapper = sh -c id\noverride.ca_cert = /etc/x\n", "s3remote", "", `{"vfs_cache_max_size":"off"}`, ""},
		{"[m]\ntype = memory\n", "m", "", `{"CacheMaxSize":1099511627776}`, `{"devname":"x"}`},
		{s3Conf + "Endpoint = x\nbearer_token = t\n", "s3remote", "", `{"cachemode":"full"}`, `{"AllowOther":true}`},
	} {
		f.Add(s[0], s[1], s[2], s[3], s[4])
	}
	f.Fuzz(func(t *testing.T, configData, remote, remotePath, vfsOpt, mountOpt string) {
		secret := map[string]string{
			KeyConfigData: configData,
			KeyRemote:     remote,
			KeyRemotePath: remotePath,
			KeyVFSOpt:     vfsOpt,
			KeyMountOpt:   mountOpt,
		}
		v, err := Parse(secret, nil, nil)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error does not wrap ErrInvalid: %v", err)
			}
			return
		}
		bad := func(s string) bool { return strings.ContainsAny(s, "\r\n\x00") }
		if _, ok := v.Config[v.Remote]; !ok {
			t.Fatalf("remote %q is not a section of %q", v.Remote, v.Config)
		}
		for name, section := range v.Config {
			if bad(name) {
				t.Fatalf("section name %q", name)
			}
			typ := section["type"]
			if typ == "local" || typ == "cache" || typ == "memory" {
				t.Fatalf("section %q has type %q", name, typ)
			}
			for key, value := range section {
				if bad(key) || bad(value) {
					t.Fatalf("section %q option %q = %q", name, key, value)
				}
				if _, ok := backendOptions(typ)[key]; key != "type" && !ok {
					t.Fatalf("section %q (%s) holds %q, which is not an option rclone registers for it", name, typ, key)
				}
			}
		}
		for _, part := range strings.Split(v.Path, "/") {
			if part == ".." {
				t.Fatalf("path %q leaves its base", v.Path)
			}
		}
		if bad(v.Path) {
			t.Fatalf("path %q", v.Path)
		}
		for i, opts := range []map[string]string{v.VFSOpt, v.MountOpt} {
			for name, value := range opts {
				if bad(name) || bad(value) {
					t.Fatalf("option %q = %q", name, value)
				}
				if o, ok := []structOptions{vfsOptions, mountOptions}[i][name]; !ok || o.name != name {
					t.Fatalf("option %q is not rclone's config name of an option", name)
				}
			}
		}
		if size := v.VFSOpt["vfs_cache_max_size"]; size == "" || size == "off" || strings.HasPrefix(size, "-") {
			t.Fatalf("cache size %q is not bounded", size)
		}
	})
}
