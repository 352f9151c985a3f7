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
func Command(name string, args []string, in io.Reader, out io.Writer) error {
	fl := flag.NewFlagSet(name, flag.ContinueOnError)
	pubFile := fl.String("public-key", "", "the secret service's RSA public key (PEM)")
	if err := fl.Parse(args); err != nil {
		return err
	}
	if fl.NArg() > 0 {
		return errors.New("encrypt takes no arguments: the value is read from stdin")
	}
	if *pubFile == "" {
		return errors.New("--public-key is required; the value is read from stdin")
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
	ct, err := Encrypt(pub, []byte(strings.TrimSuffix(string(value), "\n")))
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(out, ct)
	return err
}
