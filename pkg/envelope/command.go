package envelope

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
)

// Command is the "encrypt" command of both binaries: it reads one value on
// in and writes it encrypted for the public key named by --public-key, ready
// for a Secret. The value is never an argument: arguments are visible to
// every user of the machine and land in shell history.
//
// The value is bound (v2) to --namespace, --option and, if given, --host;
// --unbound writes the v1 form instead, which the secret service refuses
// unless its operator allows it.
func Command(name string, args []string, in io.Reader, out io.Writer) error {
	fl := flag.NewFlagSet(name, flag.ContinueOnError)
	pubFile := fl.String("public-key", "", "the secret service's RSA public key (PEM)")
	namespace := fl.String("namespace", "", "the Kubernetes namespace of the PVCs that may use the value (required)")
	option := fl.String("option", "", "the rclone option the value is for, e.g. secret_access_key (required)")
	host := fl.String("host", "", "the remote's server (host, host:port or URL) the value may be sent to; empty allows any")
	unbound := fl.Bool("unbound", false, "write a v1 value, usable in any namespace and under any option (weaker; refused by default)")
	if err := fl.Parse(args); err != nil {
		return err
	}
	if fl.NArg() > 0 {
		return errors.New("encrypt takes no arguments: the value is read from stdin")
	}
	if *pubFile == "" {
		return errors.New("--public-key is required; the value is read from stdin")
	}
	var c Context
	switch {
	case *unbound && (*namespace != "" || *option != "" || *host != ""):
		return errors.New("--unbound takes no --namespace, --option or --host")
	case !*unbound:
		if *namespace == "" || *option == "" {
			return errors.New("--namespace and --option are required (or --unbound, which is weaker)")
		}
		c = Context{Namespace: *namespace, Option: *option}
		if *host != "" {
			h, err := NormalizeHost(*host)
			if err != nil {
				return fmt.Errorf("--host: %w", err)
			}
			c.Host = h
		}
		if err := c.Validate(); err != nil {
			return err
		}
	}
	pub, err := ReadPublicKey(*pubFile)
	if err != nil {
		return err
	}
	value, err := io.ReadAll(in)
	if err != nil {
		return fmt.Errorf("reading stdin: %w", err)
	}
	// One trailing newline is what echo and a here-doc add; more is data.
	plain := []byte(strings.TrimSuffix(string(value), "\n"))
	var ct string
	if *unbound {
		ct, err = SealUnbound(pub, plain)
	} else {
		ct, err = Seal(pub, c, plain)
	}
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(out, ct)
	return err
}
