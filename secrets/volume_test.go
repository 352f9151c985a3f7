package secrets

import (
	"errors"
	"maps"
	"strings"
	"testing"
)

const (
	s3Conf = "[s3remote]\ntype = s3\nprovider = Other\naccess_key_id = AK\nsecret_access_key = SK\nendpoint = http://127.0.0.1:9000\n"
	// leak is a credential that no error message may quote.
	leak       = "SUPERSECRETVALUE123"
	s3LeakConf = "[s3remote]\ntype = s3\nprovider = Other\naccess_key_id = AK\nsecret_access_key = " + leak + "\nendpoint = http://127.0.0.1:9000\n"
)

// sec is a stage secret with configData and remote.
func sec(configData, remote string, kv ...string) map[string]string {
	m := map[string]string{KeyConfigData: configData, KeyRemote: remote}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return m
}

func TestParse(t *testing.T) {
	crypt := s3Conf + "[enc]\ntype = crypt\nremote = s3remote:bucket/enc\npassword = CRYPTPASS\n"
	for _, tc := range []struct {
		name          string
		secret, volCx map[string]string
		policy        *Policy
		remote, path  string
		config        Config // options that must be in the result
		vfs, mount    map[string]string
	}{
		{
			name:   "plain s3",
			secret: sec(s3Conf, "s3remote", KeyRemotePath, "bucket/prefix"),
			remote: "s3remote", path: "bucket/prefix",
			config: Config{"s3remote": {"type": "s3", "provider": "Other", "access_key_id": "AK", "secret_access_key": "SK", "endpoint": "http://127.0.0.1:9000"}},
		},
		{
			name:   "crypt over s3",
			secret: sec(crypt, "enc", KeyRemotePath, "docs"),
			remote: "enc", path: "docs",
			config: Config{"enc": {"type": "crypt", "remote": "s3remote:bucket/enc", "password": "CRYPTPASS"}, "s3remote": {"type": "s3"}},
		},
		{
			name:   "alias and union over s3",
			secret: sec(s3Conf+"[a]\ntype = alias\nremote = s3remote:bucket\n[u]\ntype = union\nupstreams = a:x s3remote:y:ro\n", "u"),
			remote: "u",
		},
		{
			name:   "secret keys win over volume context",
			secret: map[string]string{KeyRemote: "s3remote", KeyRemotePath: "fromsecret"},
			volCx:  map[string]string{KeyRemote: "other", KeyRemotePath: "fromcontext", KeyConfigData: s3Conf},
			remote: "s3remote", path: "fromsecret",
		},
		{
			name:   "everything in the volume context",
			volCx:  sec(s3Conf, "s3remote", KeyRemotePath, "bucket"),
			remote: "s3remote", path: "bucket",
		},
		{
			name:   "remotePathSuffix appended",
			secret: sec(s3Conf, "s3remote", KeyRemotePath, "bucket/prefix"),
			volCx:  map[string]string{KeyRemotePathSuffix: "user/1"},
			remote: "s3remote", path: "bucket/prefix/user/1",
		},
		{
			name:   "remote with a trailing colon",
			secret: sec(s3Conf, " s3remote: "),
			remote: "s3remote",
		},
		{
			name:   "remotePath cleaned",
			secret: sec(s3Conf, "s3remote", KeyRemotePath, "bucket//a/./b/"),
			remote: "s3remote", path: "bucket/a/b/",
		},
		{
			name:   "override from the secret",
			secret: sec(s3Conf, "s3remote", "secret_access_key", "OVERRIDE"),
			remote: "s3remote",
			config: Config{"s3remote": {"secret_access_key": "OVERRIDE"}},
		},
		{
			name: "options: snake_case names",
			secret: sec(s3Conf, "s3remote",
				KeyVFSOpt, `{"vfs_cache_mode":"full","dir_cache_time":"5m"}`,
				KeyMountOpt, `{"allow_other":true,"attr_timeout":"1s"}`),
			remote: "s3remote",
			vfs:    map[string]string{"vfs_cache_mode": "full", "dir_cache_time": "5m"},
			mount:  map[string]string{"allow_other": "true", "attr_timeout": "1s"},
		},
		{
			name: "options: Go field names, numbers and booleans",
			secret: sec(s3Conf, "s3remote",
				KeyVFSOpt, `{"CacheMode":"writes","CacheMaxSize":1073741824,"ReadOnly":true,"Umask":18}`,
				KeyMountOpt, `{"AllowOther":true,"AllowRoot":false,"MaxReadAhead":131072}`),
			remote: "s3remote",
			// JSON numbers for sizes are bytes, as in rclone's rc API.
			vfs:   map[string]string{"vfs_cache_mode": "writes", "vfs_cache_max_size": "1073741824B", "read_only": "true", "umask": "18"},
			mount: map[string]string{"allow_other": "true", "allow_root": "false", "max_read_ahead": "131072B"},
		},
		{
			name:   "options: sizes as strings keep rclone's syntax",
			secret: sec(s3Conf, "s3remote", KeyVFSOpt, `{"vfs_cache_max_size":"10G","vfs_read_ahead":"off"}`),
			policy: &Policy{Limits: Limits{ReadAhead: -1}},
			remote: "s3remote",
			vfs:    map[string]string{"vfs_cache_max_size": "10G", "vfs_read_ahead": "off"},
		},
		{
			name:   "deny-listed value allowed by policy",
			secret: sec("[o]\ntype = oracleobjectstorage\nprovider = instance_principal_auth\nnamespace = n\nregion = r\n", "o"),
			policy: &Policy{AllowOptions: []string{"provider=instance_principal_auth"}},
			remote: "o",
		},
		{
			name:   "local allowed by policy",
			secret: sec("[disk]\ntype = local\n", "disk", KeyRemotePath, "/data"),
			policy: &Policy{AllowBackends: []string{"local"}},
			remote: "disk", path: "/data",
		},
		{
			name:   "denied mount option allowed by policy",
			secret: sec(s3Conf, "s3remote", KeyMountOpt, `{"daemon":true}`),
			policy: &Policy{AllowOptions: []string{"daemon"}},
			remote: "s3remote",
			mount:  map[string]string{"daemon": "true"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, err := Parse(tc.secret, tc.volCx, tc.policy)
			if err != nil {
				t.Fatal(err)
			}
			if v.Remote != tc.remote || v.Path != tc.path {
				t.Errorf("remote, path = %q, %q; want %q, %q", v.Remote, v.Path, tc.remote, tc.path)
			}
			if _, ok := v.Config[v.Remote]; !ok {
				t.Errorf("remote %q is not a section of %v", v.Remote, v.Config)
			}
			for name, want := range tc.config {
				for k, w := range want {
					if got := v.Config[name][k]; got != w {
						t.Errorf("[%s] %s = %q, want %q", name, k, got, w)
					}
				}
			}
			wantVFS := maps.Clone(tc.vfs)
			if wantVFS == nil {
				wantVFS = map[string]string{}
			}
			if _, ok := wantVFS["vfs_cache_max_size"]; !ok {
				wantVFS["vfs_cache_max_size"] = "5368709120B" // every volume gets a bounded cache
			}
			if !maps.Equal(v.VFSOpt, wantVFS) {
				t.Errorf("VFSOpt = %v, want %v", v.VFSOpt, wantVFS)
			}
			if !maps.Equal(v.MountOpt, tc.mount) {
				t.Errorf("MountOpt = %v, want %v", v.MountOpt, tc.mount)
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	const (
		local = "[disk]\ntype = local\n"
		alias = "[a]\ntype = alias\nremote = "
	)
	for _, tc := range []struct {
		name   string
		secret map[string]string
		msg    string // a part of the error message that tells the cause
	}{
		{name: "no configData", secret: map[string]string{KeyRemote: "s3remote"}, msg: KeyConfigData},
		{name: "blank configData", secret: sec(" \n ", "s3remote"), msg: KeyConfigData},
		{name: "no remote", secret: sec(s3LeakConf, ""), msg: KeyRemote},
		{name: "remote is not a section", secret: sec(s3LeakConf, "other"), msg: "other"},
		{name: "connection string as remote", secret: sec(s3LeakConf, "s3remote,env_auth=true"), msg: "not a plain"},
		{name: "on-the-fly remote", secret: sec(s3LeakConf, ":s3"), msg: "not a plain"},
		{name: "remote with a path", secret: sec(s3LeakConf, "s3remote:bucket"), msg: "not a plain"},
		{name: "section name with a comma", secret: sec("[s3remote,env_auth=true]\ntype = s3\n", "s3remote"), msg: "not a plain"},
		{name: "remotePath ..", secret: sec(s3LeakConf, "s3remote", KeyRemotePath, ".."), msg: KeyRemotePath},
		{name: "remotePath ../x", secret: sec(s3LeakConf, "s3remote", KeyRemotePath, "../other"), msg: KeyRemotePath},
		{name: "remotePath a/../../x", secret: sec(s3LeakConf, "s3remote", KeyRemotePath, "bucket/../../x"), msg: KeyRemotePath},
		{name: "remotePathSuffix ..", secret: sec(s3LeakConf, "s3remote", KeyRemotePath, "bucket/tenant", KeyRemotePathSuffix, "../other"), msg: KeyRemotePath},
		{name: "remotePath with a newline", secret: sec(s3LeakConf, "s3remote", KeyRemotePath, "b\n[evil]"), msg: KeyRemotePath},
		{name: "option outside any section", secret: sec("env_auth = true\n"+s3LeakConf, "s3remote")},
		{name: "option in DEFAULT", secret: sec("[DEFAULT]\nenv_auth = true\n"+s3LeakConf, "s3remote"), msg: "outside any"},
		{name: "no section", secret: sec("# nothing\n", "s3remote")},
		{name: "section without type", secret: sec("[s3remote]\nprovider = Other\n", "s3remote"), msg: "no type"},
		{name: "unknown backend type", secret: sec("[s3remote]\ntype = nosuch\n", "s3remote"), msg: "nosuch"},
		{name: "backend local", secret: sec(local, "disk"), msg: "local"},
		{name: "backend cache", secret: sec(s3LeakConf+"[c]\ntype = cache\nremote = s3remote:x\n", "c"), msg: "cache"},
		{name: "backend local in an unused section", secret: sec(s3LeakConf+local, "s3remote"), msg: "local"},
		{name: "alias to a local path", secret: sec(s3LeakConf+alias+"/etc\n", "a"), msg: "remote"},
		{name: "alias to an on-the-fly local", secret: sec(s3LeakConf+alias+":local:/etc\n", "a"), msg: "remote"},
		{name: "alias to a connection string", secret: sec(s3LeakConf+alias+"s3remote,env_auth=true:x\n", "a"), msg: "not a plain"},
		{name: "alias to a missing section", secret: sec(s3LeakConf+alias+"nosuch:x\n", "a"), msg: "nosuch"},
		{name: "alias path leaves its base", secret: sec(s3LeakConf+alias+"s3remote:bucket/../other\n", "a"), msg: "leaves"},
		{name: "empty alias", secret: sec(s3LeakConf+alias+"\n", "a"), msg: "empty"},
		{name: "union with a local upstream", secret: sec(s3LeakConf+"[u]\ntype = union\nupstreams = s3remote:a s3remote:b /etc\n", "u"), msg: "/etc"},
		{name: "union with an on-the-fly upstream", secret: sec(s3LeakConf+"[u]\ntype = union\nupstreams = s3remote:a :local:/etc:ro\n", "u"), msg: "upstreams"},
		{
			name:   "union upstream that is an on-the-fly local with a = in it",
			secret: sec(s3LeakConf+"[u]\ntype = union\nupstreams = s3remote:a :local,description=s3remote:/etc\n", "u"),
			msg:    "upstreams",
		},
		{
			name:   "union upstream that is a connection string with a = in it",
			secret: sec(s3LeakConf+"[true]\ntype = s3\nprovider = Other\n[u]\ntype = union\nupstreams = s3remote,env_auth=true:a s3remote:b\n", "u"),
			msg:    "upstreams",
		},
		{name: "combine with an on-the-fly upstream", secret: sec(s3LeakConf+"[c]\ntype = combine\nupstreams = a=s3remote:a b=:local:/etc\n", "c"), msg: "upstreams"},
		{name: "crypt wrapping itself", secret: sec(s3LeakConf+"[enc]\ntype = crypt\nremote = enc:x\npassword = p\n", "enc"), msg: "wraps itself"},
		{name: "cycle a-b-a", secret: sec(s3LeakConf+"[a]\ntype = alias\nremote = b:\n[b]\ntype = alias\nremote = a:x\n", "s3remote"), msg: "wraps itself"},
		{name: "override with a newline", secret: sec(s3LeakConf, "s3remote", "endpoint", "x\n[evil]\ntype = local"), msg: "line break"},
		{name: "override of a denied option", secret: sec(s3LeakConf, "s3remote", "env_auth", "true"), msg: "env_auth"},
		{name: "vfsOpt value with a newline", secret: sec(s3LeakConf, "s3remote", KeyVFSOpt, `{"vfs_cache_mode":"full\n[evil]\ntype = local"}`), msg: "line break"},
		{name: "vfsOpt value with a carriage return", secret: sec(s3LeakConf, "s3remote", KeyVFSOpt, `{"vfs_cache_mode":"full\r"}`), msg: "line break"},
		{name: "mountOpt value with a newline", secret: sec(s3LeakConf, "s3remote", KeyMountOpt, `{"attr_timeout":"1s\nx"}`), msg: "line break"},
		{name: "vfsOpt array", secret: sec(s3LeakConf, "s3remote", KeyVFSOpt, `["vfs_cache_mode"]`), msg: KeyVFSOpt},
		{name: "vfsOpt string", secret: sec(s3LeakConf, "s3remote", KeyVFSOpt, `"full"`), msg: KeyVFSOpt},
		{name: "vfsOpt not JSON", secret: sec(s3LeakConf, "s3remote", KeyVFSOpt, `vfs_cache_mode=full`), msg: KeyVFSOpt},
		{name: "vfsOpt two objects", secret: sec(s3LeakConf, "s3remote", KeyVFSOpt, `{} {"uid":"0"}`), msg: KeyVFSOpt},
		{name: "vfsOpt nested value", secret: sec(s3LeakConf, "s3remote", KeyVFSOpt, `{"vfs_cache_mode":{"a":1}}`), msg: "vfs_cache_mode"},
		{name: "vfsOpt unknown option", secret: sec(s3LeakConf, "s3remote", KeyVFSOpt, `{"no_such_option":"1"}`), msg: "no_such_option"},
		{name: "vfsOpt mount option", secret: sec(s3LeakConf, "s3remote", KeyVFSOpt, `{"allow_other":true}`), msg: "allow_other"},
		{name: "mountOpt daemon", secret: sec(s3LeakConf, "s3remote", KeyMountOpt, `{"daemon":true}`), msg: "daemon"},
		{name: "mountOpt Daemon", secret: sec(s3LeakConf, "s3remote", KeyMountOpt, `{"Daemon":true}`), msg: "daemon"},
		{name: "mountOpt option", secret: sec(s3LeakConf, "s3remote", KeyMountOpt, `{"option":"allow_other"}`), msg: "option"},
		{name: "mountOpt ExtraOptions", secret: sec(s3LeakConf, "s3remote", KeyMountOpt, `{"ExtraOptions":"dev"}`), msg: "option"},
		{name: "mountOpt --fuse-flag", secret: sec(s3LeakConf, "s3remote", KeyMountOpt, `{"--fuse-flag":"x"}`), msg: "fuse-flag"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, err := Parse(tc.secret, nil, nil)
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("got %+v, %v; want an error wrapping ErrInvalid", v, err)
			}
			if !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("error %q does not say %q", err, tc.msg)
			}
			if strings.Contains(err.Error(), leak) {
				t.Errorf("error quotes the secret: %q", err)
			}
		})
	}
}

// TestParseDeniedOptions checks each denied option with a backend that has
// it, refused by default and accepted when the policy allows it.
func TestParseDeniedOptions(t *testing.T) {
	sftp := "[r]\ntype = sftp\nhost = example.com\n"
	for _, tc := range []struct{ option, config string }{
		{"env_auth", "[r]\ntype = s3\nprovider = AWS\nenv_auth = true\n"},
		{"ssh", sftp + "ssh = ssh -o ProxyCommand=evil example.com\n"},
		{"key_file", sftp + "key_file = /var/lib/kubelet/pki/kubelet.key\n"},
		{"md5sum_command", sftp + "md5sum_command = sh -c evil\n"},
		{"msi_client_id", "[r]\ntype = azureblob\naccount = acc\nmsi_client_id = id\n"},
		{"use_msi", "[r]\ntype = azureblob\naccount = acc\nuse_msi = true\n"},
		{"service_account_file", "[r]\ntype = google cloud storage\nservice_account_file = /etc/gcp.json\n"},
		{"kerberos_ccache", "[r]\ntype = smb\nhost = h\nkerberos_ccache = /tmp/krb5cc_0\n"},
	} {
		t.Run(tc.option, func(t *testing.T) {
			secret := sec(tc.config, "r")
			_, err := Parse(secret, nil, nil)
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.option) {
				t.Fatalf("default policy: got %v, want %s refused", err, tc.option)
			}
			if _, err := Parse(secret, nil, &Policy{AllowOptions: []string{tc.option}}); err != nil {
				t.Fatalf("with AllowOptions: %v", err)
			}
		})
	}
	t.Run("unix_socket", func(t *testing.T) {
		_, err := Parse(sec("[r]\ntype = webdav\nurl = http://x\nunix_socket = /run/containerd/containerd.sock\n", "r"), nil, nil)
		if !errors.Is(err, ErrInvalid) {
			t.Fatalf("got %v, want unix_socket refused", err)
		}
	})
}

// TestParseErrorsDoNotLeak feeds malformed input holding a credential and
// checks that no error message quotes it.
func TestParseErrorsDoNotLeak(t *testing.T) {
	head := "[s3remote]\ntype = s3\nprovider = Other\n"
	for _, tc := range []struct {
		name   string
		secret map[string]string
	}{
		{name: "line without separator", secret: sec(head+"secret_access_key "+leak+"\n", "s3remote")},
		{name: "unterminated quoted value", secret: sec(head+"secret_access_key = `"+leak+"\n", "s3remote")},
		{name: "unterminated quoted key", secret: sec(head+`"secret_access_key = `+leak+"\n", "s3remote")},
		{name: "secret on its own line", secret: sec(head+"secret_access_key =\n"+leak+"\n", "s3remote")},
		{name: "unterminated section header", secret: sec("[s3remote "+leak+"\ntype = s3\n", "s3remote")},
		{name: "secret before any section", secret: sec("secret_access_key = "+leak+"\n"+head, "s3remote")},
		{name: "NUL in config", secret: sec(head+"secret_access_key = "+leak+"\x00\n", "s3remote")},
		{name: "override with a newline", secret: sec(head, "s3remote", "secret_access_key", leak+"\nx")},
		{name: "vfsOpt value with a newline", secret: sec(head, "s3remote", KeyVFSOpt, `{"vfs_cache_mode":"`+leak+`\n"}`)},
		{name: "vfsOpt value not a string", secret: sec(head, "s3remote", KeyVFSOpt, `{"vfs_cache_mode":["`+leak+`"]}`)},
		{name: "vfsOpt malformed", secret: sec(head, "s3remote", KeyVFSOpt, `{"vfs_cache_mode":"`+leak)},
		{name: "valid config, missing remote section", secret: sec(s3LeakConf, "other")},
		{name: "valid config, denied option", secret: sec(s3LeakConf+"env_auth = true\n", "s3remote")},
		{
			name:   "separator missing, secret with ] and =",
			secret: sec(head+"secret_access_key "+leak+"]=\n", "s3remote"),
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse(tc.secret, nil, nil)
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("got %v, want an error wrapping ErrInvalid", err)
			}
			if strings.Contains(err.Error(), leak) {
				t.Errorf("error quotes the secret: %q", err)
			}
		})
	}
}
