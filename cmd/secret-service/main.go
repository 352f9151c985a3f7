// Command secret-service is the reference secret service for csi-rclone: it
// decrypts envelope-encrypted stage-secret values for an authenticated CSI
// driver (serve), and encrypts values (encrypt) with keys it makes (keygen).
package main

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"os"

	"k8s.io/klog/v2"

	"github.com/csi-rclone/csi-rclone/pkg/envelope"
)

const usage = `usage: secret-service <command> [flags]

commands:
  serve    serve Decrypt over gRPC and HTTP/JSON
  encrypt  encrypt the value on stdin for a public key, bound to a namespace and option
  keygen   write a new RSA key pair
`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	cmds := map[string]func([]string) error{"serve": serve, "encrypt": encrypt, "keygen": keygen}
	cmd, ok := cmds[os.Args[1]]
	if !ok {
		fmt.Fprintf(os.Stderr, "unknown command %q\n%s", os.Args[1], usage)
		os.Exit(2)
	}
	if err := cmd(os.Args[2:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(2)
		}
		klog.ErrorS(err, "secret-service "+os.Args[1]+" failed")
		klog.Flush()
		os.Exit(1)
	}
	klog.Flush()
}

// encrypt is envelope.Command on stdin and stdout.
func encrypt(args []string) error {
	return envelope.Command("secret-service encrypt", args, os.Stdin, os.Stdout)
}

// keygen writes a new RSA key pair: the private key PKCS#8, the public key
// PKIX. It never overwrites a file: losing the private key makes every
// encrypted value in the cluster undecryptable.
func keygen(args []string) error {
	fl := flag.NewFlagSet("keygen", flag.ContinueOnError)
	privFile := fl.String("private-key", "", "where to write the private key (PEM, mode 0600)")
	pubFile := fl.String("public-key", "", "where to write the public key (PEM)")
	bits := fl.Int("bits", 3072, "RSA key size")
	if err := fl.Parse(args); err != nil {
		return err
	}
	if *privFile == "" || *pubFile == "" {
		return errors.New("--private-key and --public-key are required")
	}
	if *bits < 2048 {
		return fmt.Errorf("--bits %d: at least 2048", *bits)
	}
	key, err := rsa.GenerateKey(rand.Reader, *bits)
	if err != nil {
		return err
	}
	privDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	pubDER, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return err
	}
	if err := writePEM(*privFile, 0o600, "PRIVATE KEY", privDER); err != nil {
		return err
	}
	return writePEM(*pubFile, 0o644, "PUBLIC KEY", pubDER)
}

func writePEM(path string, mode os.FileMode, typ string, der []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	if err := pem.Encode(f, &pem.Block{Type: typ, Bytes: der}); err != nil {
		f.Close()
		return fmt.Errorf("%s: %w", path, err)
	}
	return f.Close()
}
