package secrets

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
)

// TestTenantAttacks is one row per attack a tenant can write into a stage
// secret; each must be refused with ErrInvalid and a message naming what.
func TestTenantAttacks(t *testing.T) {
	s3 := "[s3remote]\ntype = s3\nprovider = Other\naccess_key_id = AK\nsecret_access_key = SK\nendpoint = http://s3.example.org\n"
	big := strings.Repeat("x", 1<<20)
	loopback := &Policy{DenyNetworks: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}}
	for _, tc := range []struct {
		class, name string
		secret      map[string]string
		policy      *Policy
		msg         string
	}{
		// rclone reads global.<flag> and override.<flag> inside a section:
		// every global flag, not one of them an option of the backend.
		{"global key", "command (metadata_mapper)", sec(s3+"global.metadata = true\nglobal.metadata_mapper = sh -c id\n", "s3remote"), nil, "global.metadata"},
		{"global key", "node file (ca_cert)", sec(s3+"global.ca_cert = /var/lib/kubelet/pki/kubelet.crt\n", "s3remote"), nil, "global.ca_cert"},
		{"global key", "node file (client_key)", sec(s3+"global.client_key = /etc/kubernetes/pki/ca.key\n", "s3remote"), nil, "global.client_key"},
		{"global key", "proxy", sec(s3+"global.http_proxy = http://evil:3128\n", "s3remote"), nil, "global.http_proxy"},
		{"global key", "memory (buffer_size)", sec(s3+"global.buffer_size = 100G\n", "s3remote"), nil, "global.buffer_size"},
		{"override key", "command", sec(s3+"override.metadata_mapper = sh -c id\n", "s3remote"), nil, "override.metadata_mapper"},
		{"override key", "node file", sec(s3+"override.client_cert = /etc/shadow\n", "s3remote"), nil, "override.client_cert"},
		{"override key", "proxy", sec(s3+"override.http_proxy = http://evil\n", "s3remote"), nil, "override.http_proxy"},
		{"override key", "memory", sec(s3+"override.buffer_size = 100G\n", "s3remote"), nil, "override.buffer_size"},
		{"global key", "as a secret key", sec(s3, "s3remote", "global.metadata_mapper", "sh -c id"), nil, "global.metadata_mapper"},

		// Only what the section's backend registers, spelled as rclone does.
		{"unknown name", "not an rclone option", sec(s3+"config = /root/.config/rclone/rclone.conf\n", "s3remote"), nil, `"config"`},
		{"unknown name", "another backend's option", sec(s3+"bearer_token = t\n", "s3remote"), nil, "bearer_token"},
		{"unknown name", "another backend's option as a secret key", sec(s3, "s3remote", "bearer_token", "t"), nil, "bearer_token"},
		{"unknown name", "vfsOpt", sec(s3, "s3remote", KeyVFSOpt, `{"no_such":"1"}`), nil, "no_such"},
		{"mis-cased name", "in configData", sec(s3+"Secret_Access_Key = x\n", "s3remote"), nil, "Secret_Access_Key"},
		{"mis-cased name", "upper case", sec(s3+"ENDPOINT = http://x\n", "s3remote"), nil, "ENDPOINT"},
		{"mis-cased name", "vfsOpt, lower-cased field", sec(s3, "s3remote", KeyVFSOpt, `{"cachemode":"full"}`), nil, "vfs_cache_mode"},
		{"mis-cased name", "vfsOpt, flag spelling", sec(s3, "s3remote", KeyVFSOpt, `{"--vfs-cache-mode":"full"}`), nil, "vfs_cache_mode"},
		{"mis-cased name", "mountOpt", sec(s3, "s3remote", KeyMountOpt, `{"allowother":true}`), nil, "allow_other"},
		{"mis-cased name", "secret key", sec(s3, "s3remote", "Secret_Access_Key", "x"), nil, "Secret_Access_Key"},

		// Denied families inside the registered options.
		{"denied option", "azure emulator on the node's loopback", sec("[a]\ntype = azureblob\naccount = x\nuse_emulator = true\n", "a"), nil, "use_emulator"},
		{"denied option", "hdfs kerberos from the node", sec("[h]\ntype = hdfs\nnamenode = nn:8020\nservice_principal_name = hdfs/nn\n", "h"), nil, "service_principal_name"},
		{"denied option", "sftp environment", sec("[r]\ntype = sftp\nhost = h\nset_env = LD_PRELOAD=/tmp/x.so\n", "r"), nil, "set_env"},
		{"denied value", "oracle instance principal", sec("[o]\ntype = oracleobjectstorage\nprovider = instance_principal_auth\nnamespace = n\nregion = r\n", "o"), nil, "instance_principal_auth"},
		{"denied mount option", "devname", sec(s3, "s3remote", KeyMountOpt, `{"devname":"x"}`), nil, "devname"},

		// Every resource bounded, refused rather than clamped.
		{"memory", "memory backend", sec("[m]\ntype = memory\n", "m"), nil, "memory"},
		{"cap", "cache size off", sec(s3, "s3remote", KeyVFSOpt, `{"vfs_cache_max_size":"off"}`), nil, "20Gi"},
		{"cap", "cache size above", sec(s3, "s3remote", KeyVFSOpt, `{"CacheMaxSize":"1T"}`), nil, "cache size"},
		{"cap", "cache size as bytes above", sec(s3, "s3remote", KeyVFSOpt, `{"CacheMaxSize":1099511627776}`), nil, "cache size"},
		{"cap", "read-ahead 1P", sec(s3, "s3remote", KeyVFSOpt, `{"vfs_read_ahead":"1P"}`), nil, "read-ahead"},
		{"cap", "kernel read-ahead 2G", sec(s3, "s3remote", KeyMountOpt, `{"max_read_ahead":"2G"}`), nil, "read-ahead"},
		{"cap", "chunk streams", sec(s3, "s3remote", KeyVFSOpt, `{"vfs_read_chunk_streams":100000}`), nil, "streams"},
		{"cap", "read chunk size", sec(s3, "s3remote", KeyVFSOpt, `{"vfs_read_chunk_size":"10G"}`), nil, "chunk size"},
		{"cap", "read chunk size limit off", sec(s3, "s3remote", KeyVFSOpt, `{"vfs_read_chunk_size_limit":"off"}`), nil, "chunk size"},
		{"cap", "backend chunk size", sec(s3+"chunk_size = 5G\n", "s3remote"), nil, "chunk size"},
		{"cap", "backend upload concurrency", sec(s3+"upload_concurrency = 1000\n", "s3remote"), nil, "streams"},
		{"cap", "backend memory buffer", sec(s3+"[c]\ntype = compress\nremote = s3remote:x\nram_cache_limit = 100G\n", "c"), nil, "buffer size"},
		{"cap", "operator's lower cache limit", sec(s3, "s3remote", KeyVFSOpt, `{"vfs_cache_max_size":"2G"}`), &Policy{Limits: Limits{CacheSize: fs1G}}, "1Gi"},
		{"cap", "operator's lower stream limit as a secret key", sec(s3, "s3remote", "upload_concurrency", "5"), &Policy{Limits: Limits{Streams: 4}}, "streams"},
		{"size", "1 MiB value in configData", sec(s3+"description = "+big+"\n", "s3remote"), nil, "bytes"},
		{"size", "1 MiB override", sec(s3, "s3remote", "secret_access_key", big), nil, "bytes"},
		{"size", "1 MiB vfsOpt", sec(s3, "s3remote", KeyVFSOpt, `{"vfs_metadata_extension":"`+big+`"}`), nil, "bytes"},
		{"size", "whole secret", sec(s3, "s3remote", "description", strings.Repeat("x", 10<<10), "endpoint", strings.Repeat("y", 10<<10), "region", strings.Repeat("z", 10<<10), "location_constraint", strings.Repeat("z", 10<<10), "acl", strings.Repeat("z", 10<<10), "storage_class", strings.Repeat("z", 10<<10), "sse_kms_key_id", strings.Repeat("z", 10<<10)), nil, "bytes"},
		{"required", "webdav without url", sec("[w]\ntype = webdav\nuser = u\n", "w"), nil, `requires option "url"`},
		{"required", "sftp without host", sec("[r]\ntype = sftp\nuser = u\n", "r"), nil, `requires option "host"`},
		{"required", "crypt without password", sec(s3+"[enc]\ntype = crypt\nremote = s3remote:x\n", "enc"), nil, `requires option "password"`},

		// Remotes may not reach the node's cloud identity.
		{"network", "http at the metadata service", sec("[h]\ntype = http\nurl = http://169.254.169.254/latest/meta-data/\n", "h"), nil, "169.254"},
		{"network", "s3 endpoint without a scheme", sec("[s]\ntype = s3\nprovider = Other\nendpoint = 169.254.169.254\n", "s"), nil, "169.254"},
		{"network", "IPv6 metadata", sec("[s]\ntype = s3\nprovider = Other\nendpoint = http://[fd00:ec2::254]/\n", "s"), nil, "fd00:ec2::254"},
		{"network", "IPv4-mapped IPv6", sec("[h]\ntype = http\nurl = http://[::ffff:169.254.169.254]/\n", "h"), nil, "169.254"},
		{"network", "metadata by name", sec("[h]\ntype = http\nurl = http://metadata.google.internal/computeMetadata/v1/\n", "h"), nil, "metadata"},
		{"network", "sftp host link-local", sec("[r]\ntype = sftp\nhost = 169.254.0.1\n", "r"), nil, "169.254"},
		{"network", "endpoint overridden by the secret", sec(s3, "s3remote", "endpoint", "http://169.254.169.254"), nil, "169.254"},
		{"network", "operator denies loopback", sec("[h]\ntype = http\nurl = http://127.0.0.1:10255/pods\n", "h"), loopback, "127.0.0.0/8"},
		{"network", "operator denies loopback, IPv6", sec("[w]\ntype = webdav\nurl = http://[::1]:8080/\n", "w"), loopback, "::1"},

		// Found by attacking the policy (a red-team review): each bypassed
		// an earlier version of it.
		{"wrapper", "archive without remote reads remotePath as a remote", sec("[a]\ntype = archive\n", "a", KeyRemotePath, "/etc"), nil, `requires option "remote"`},
		{"wrapper", "archive without remote, connection string path", sec("[a]\ntype = archive\n", "a", KeyRemotePath, `:sftp,host=127.0.0.1,ssh='sh -c id':`), nil, `requires option "remote"`},
		{"wrapper", "alias to an archive without remote", sec("[a]\ntype = archive\n[x]\ntype = alias\nremote = a:/var/run/secrets\n", "x"), nil, `requires option "remote"`},
		{"node identity", "gcs without credentials", sec("[g]\ntype = google cloud storage\nendpoint = http://tenant.example.org/storage/v1/\n", "g"), nil, "node's own identity"},
		{"node identity", "drive without credentials", sec("[d]\ntype = drive\n", "d"), nil, "node's own identity"},
		{"node identity", "oracle provider left to its default", sec("[o]\ntype = oracleobjectstorage\nnamespace = n\nregion = r\n", "o"), nil, "env_auth"},
		{"cap", "cache cleaner off", sec(s3, "s3remote", KeyVFSOpt, `{"vfs_cache_poll_interval":"0"}`), nil, "poll interval"},
		{"cap", "cache cleaner spins", sec(s3, "s3remote", KeyVFSOpt, `{"vfs_cache_poll_interval":"1ns"}`), nil, "poll interval"},
		{"cap", "handles cached for ever", sec(s3, "s3remote", KeyVFSOpt, `{"vfs_handle_caching":"100000h"}`), nil, "handle caching"},
		{"cap", "whole files in memory", sec(s3+"max_upload_parts = 1\n", "s3remote"), nil, "upload parts"},
		{"denied option", "ask_password reads the driver's pipe", sec("[r]\ntype = sftp\nhost = example.org\nask_password = true\n", "r"), nil, "ask_password"},
		{"network", "userinfo without a scheme", sec("[s]\ntype = s3\nprovider = Other\nendpoint = x@169.254.169.254\n", "s"), nil, "169.254"},
		{"network", "a scheme later in the value", sec("[s]\ntype = s3\nprovider = Other\nendpoint = 169.254.169.254/a://b\n", "s"), nil, "169.254"},
		{"network", "second item of a list", sec("[h]\ntype = hdfs\nnamenode = ok.example.org:8020,169.254.169.254:80\n", "h"), nil, "169.254"},
		{"network", "storj satellite", sec("[s]\ntype = storj\nsatellite_address = id@169.254.169.254:7777\napi_key = k\npassphrase = p\n", "s"), nil, "169.254"},
		{"network", "URL inside a connection string", sec("[a]\ntype = azurefiles\nconnection_string = AccountName=a;FileEndpoint=http://169.254.169.254/\nshare_name = s\n", "a"), nil, "169.254"},
		{"network", "token_uri inside service account JSON", sec("[g]\ntype = google cloud storage\nservice_account_credentials = {\"type\":\"service_account\",\"token_uri\":\"http:\\/\\/169.254.169.254\\/token\"}\n", "g"), nil, "169.254"},
		{"network", "netstorage host with userinfo", sec("[n]\ntype = netstorage\nprotocol = http\nhost = x@169.254.169.254/latest\naccount = a\nsecret = s\n", "n"), nil, "169.254"},
		{"network", "a default address on a denied network", sec("[s]\ntype = sia\n", "s"), loopback, "default"},
	} {
		t.Run(tc.class+"/"+tc.name, func(t *testing.T) {
			_, err := Parse(tc.secret, nil, tc.policy)
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("got %v, want an error wrapping ErrInvalid", err)
			}
			if !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("error %q does not say %q", err, tc.msg)
			}
			if len(err.Error()) > 500 {
				t.Errorf("error is %d bytes long: it quotes the input", len(err.Error()))
			}
		})
	}
}

const fs1G = 1 << 30

// TestTenantAllowed: what the policy must keep accepting.
func TestTenantAllowed(t *testing.T) {
	for _, tc := range []struct {
		name   string
		secret map[string]string
		policy *Policy
	}{
		{"s3 on loopback by default", sec(s3Conf, "s3remote"), nil},
		{"limits at their maximum", sec(s3Conf+"upload_concurrency = 8\nchunk_size = 128M\n", "s3remote", KeyVFSOpt, `{"vfs_cache_max_size":"20G","vfs_read_chunk_streams":8,"vfs_read_ahead":"1G"}`), nil},
		{"limit switched off by the operator", sec(s3Conf, "s3remote", KeyVFSOpt, `{"vfs_cache_max_size":"off"}`), &Policy{Limits: Limits{CacheSize: -1, DefaultCacheSize: fs1G}}},
		{"a public address", sec("[h]\ntype = http\nurl = https://example.org/data/\n", "h"), nil},
		{"a name, not an address", sec("[h]\ntype = webdav\nurl = https://dav.example.org/\n", "h"), nil},
		{"sftp with a port", sec("[r]\ntype = sftp\nhost = example.org\nport = 2222\n", "r"), nil},
		{"oracle without auth", sec("[o]\ntype = oracleobjectstorage\nprovider = no_auth\nnamespace = n\nregion = r\n", "o"), nil},
		{"description on any backend", sec(s3Conf+"description = my data\n", "s3remote"), nil},
		{"archive over s3", sec(s3Conf+"[a]\ntype = archive\nremote = s3remote:bucket/zips\n", "a"), nil},
		{"gcs with a service account", sec("[g]\ntype = google cloud storage\nservice_account_credentials = {\"type\":\"service_account\",\"token_uri\":\"https://oauth2.googleapis.com/token\"}\n", "g"), nil},
		{"gcs anonymous", sec("[g]\ntype = google cloud storage\nanonymous = true\n", "g"), nil},
		{"polling off", sec(s3Conf, "s3remote", KeyVFSOpt, `{"poll_interval":"0","vfs_cache_poll_interval":"30s","vfs_handle_caching":"5s"}`), nil},
		{"sia with its default address when loopback is allowed", sec("[s]\ntype = sia\n", "s"), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := Parse(tc.secret, nil, tc.policy); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestEveryBackendOptionIsRegistered guards the registry lookup itself: an
// option rclone registers is accepted unless a denied family names it.
func TestEveryBackendOptionIsRegistered(t *testing.T) {
	opts := backendOptions("s3")
	for _, name := range []string{"access_key_id", "secret_access_key", "endpoint", "region", "provider", "chunk_size"} {
		if _, ok := opts[name]; !ok {
			t.Errorf("s3 option %q not in the registry", name)
		}
	}
	if backendOptions("nosuch") != nil {
		t.Error("an unknown backend has options")
	}
}
