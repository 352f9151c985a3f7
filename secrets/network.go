package secrets

import (
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"regexp"
	"slices"
	"strings"
)

// DefaultDeniedNetworks are refused as the address of any remote whatever
// the operator lists: link-local (the cloud metadata services at
// 169.254.169.254 and fd00:ec2::254, and what the node's own link offers)
// and Alibaba's metadata address. A remote that reached them would serve the
// node's cloud identity as files. Operators add loopback and the cluster's
// pod and service ranges (the chart does).
var DefaultDeniedNetworks = []netip.Prefix{
	netip.MustParsePrefix("169.254.0.0/16"),
	netip.MustParsePrefix("fe80::/10"),
	netip.MustParsePrefix("fd00:ec2::254/128"),
	netip.MustParsePrefix("100.100.100.200/32"),
}

// deniedHosts are metadata services reached by name.
var deniedHosts = []string{"metadata", "metadata.google.internal", "metadata.goog", "instance-data", "instance-data.ec2.internal"}

// addressOptions hold one or more server addresses, with or without a
// scheme (host, host:port, user@host, lists); in every other value, any URL
// is checked, also inside JSON (a service account's token_uri).
var addressOptions = []string{
	"endpoint", "url", "host", "server", "hostname", "namenode", "api_url", "auth", "auth_url", "token_url",
	"http_proxy", "socks_proxy", "proxy", "sts_endpoint", "upload_prefix", "satellite_address", "storage_url",
}

// schemePrefix: a value that starts as a URL does.
var schemePrefix = regexp.MustCompile(`(?i)^[a-z][a-z0-9+.\-]*://`)

// urlPattern finds URLs inside any value.
var urlPattern = regexp.MustCompile(`(?i)[a-z][a-z0-9+.\-]*://[^\s"'<>,;]+`)

// ParseNetworks reads a comma-separated list of CIDRs (or single addresses).
func ParseNetworks(list string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, s := range strings.Split(list, ",") {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		p, err := netip.ParsePrefix(s)
		if err != nil {
			a, aerr := netip.ParseAddr(s)
			if aerr != nil {
				return nil, fmt.Errorf("%q is not a CIDR or an address", s)
			}
			p = netip.PrefixFrom(a, a.BitLen())
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// checkAddress refuses a value that names a denied network or host. Names
// that resolve into a denied network, and redirects a server answers with,
// are not seen here: the node plugin's NetworkPolicy is the layer that
// catches those (see SECURITY.md).
func (p *Policy) checkAddress(section, key, value string) error {
	for _, host := range addressHosts(key, value) {
		host = strings.TrimSuffix(strings.ToLower(host), ".")
		for _, h := range deniedHosts {
			if host == h {
				return invalidf("section %q option %q: %s is a metadata service, which remotes may not reach", section, key, host)
			}
		}
		addr, err := netip.ParseAddr(strings.Trim(host, "[]"))
		if err != nil {
			continue // a name
		}
		addr = addr.Unmap().WithZone("")
		for _, n := range append(DefaultDeniedNetworks, p.DenyNetworks...) {
			if n.Contains(addr) {
				return invalidf("section %q option %q: address %s is in %s, which remotes may not reach on this cluster", section, key, addr, n)
			}
		}
	}
	return nil
}

// addressHosts takes every host out of a value: from each URL in it (JSON
// string values included, whatever their escaping), and, for an address
// option, from each item of a list, read as rclone's backends read them
// (a missing scheme, user@host, host:port, a bare IPv6 address).
func addressHosts(key, value string) []string {
	value = strings.TrimSpace(value)
	if value == "" {
		return nil
	}
	texts := []string{value, strings.ReplaceAll(value, `\/`, "/")}
	texts = append(texts, jsonStrings(value)...)
	var hosts []string
	for _, text := range texts {
		for _, u := range urlPattern.FindAllString(text, -1) {
			if h := hostOf(u); h != "" {
				hosts = append(hosts, h)
			}
		}
	}
	if slices.Contains(addressOptions, key) {
		for _, item := range strings.FieldsFunc(value, func(r rune) bool { return r == ',' || r == ';' || r == ' ' || r == '\t' }) {
			if h := hostOf(item); h != "" {
				hosts = append(hosts, h)
			}
		}
	}
	return hosts
}

// hostOf reads the host of a URL or of a scheme-less address.
func hostOf(item string) string {
	if a, err := netip.ParseAddr(strings.Trim(item, "[]")); err == nil {
		return a.String() // a bare address, IPv6 without brackets included
	}
	if !schemePrefix.MatchString(item) {
		item = "//" + item // as rclone's backends add a scheme to a bare host
	}
	u, err := url.Parse(item)
	if err != nil {
		// Not a URL to Go either; take what stands before a port or path.
		host := item[strings.LastIndex(item, "@")+1:]
		host = strings.TrimPrefix(host, "//")
		host, _, _ = strings.Cut(host, "/")
		if h, _, err := net.SplitHostPort(host); err == nil {
			return h
		}
		return host
	}
	return u.Hostname()
}

// jsonStrings returns every string inside value when it is JSON.
func jsonStrings(value string) []string {
	if !strings.HasPrefix(value, "{") && !strings.HasPrefix(value, "[") {
		return nil
	}
	var v any
	if json.Unmarshal([]byte(value), &v) != nil {
		return nil
	}
	var out []string
	var walk func(any)
	walk = func(v any) {
		switch t := v.(type) {
		case string:
			out = append(out, t)
		case []any:
			for _, x := range t {
				walk(x)
			}
		case map[string]any:
			for _, x := range t {
				walk(x)
			}
		}
	}
	walk(v)
	return out
}
