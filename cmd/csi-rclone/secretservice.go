package main

import (
	"errors"
	"flag"
	"os"
	"time"

	"github.com/csi-rclone/csi-rclone/pkg/envelope"
	"github.com/csi-rclone/csi-rclone/secrets/client"
)

// secretServiceFlags configure the secret service client.
type secretServiceFlags struct {
	endpoint, caFile, tokenFile  string
	signingKey, issuer, audience string
	timeout, tokenTTL            time.Duration
}

func (f *secretServiceFlags) register(fl *flag.FlagSet) {
	fl.StringVar(&f.endpoint, "secret-service", "", "secret service endpoint (grpcs://, https://, grpc://, http://, unix://); empty: encrypted values are refused")
	fl.StringVar(&f.caFile, "secret-service-ca", "", "CA bundle that verifies the secret service's TLS certificate")
	fl.StringVar(&f.tokenFile, "secret-service-token-file", "", "a projected ServiceAccount token, read at every call")
	fl.StringVar(&f.signingKey, "secret-service-signing-key", "", "a PEM private key to sign the driver's own short-lived JWTs with, instead of a token file")
	fl.StringVar(&f.issuer, "secret-service-issuer", "csi-rclone", "issuer of self-signed JWTs")
	fl.StringVar(&f.audience, "secret-service-audience", "csi-rclone-secret-service", "audience of self-signed JWTs")
	fl.DurationVar(&f.tokenTTL, "secret-service-token-ttl", 5*time.Minute, "lifetime of self-signed JWTs")
	fl.DurationVar(&f.timeout, "secret-service-timeout", 10*time.Second, "deadline of one call to the secret service")
}

// client builds the client, or nil when no endpoint is set. Self-signed
// tokens name the node as their subject.
func (f *secretServiceFlags) client(nodeID string) (*client.Client, error) {
	if f.endpoint == "" {
		return nil, nil
	}
	if (f.tokenFile == "") == (f.signingKey == "") {
		return nil, errors.New("--secret-service needs exactly one of --secret-service-token-file and --secret-service-signing-key")
	}
	var token client.TokenSource = client.FileToken{Path: f.tokenFile}
	if f.signingKey != "" {
		st, err := client.NewSignedToken(f.signingKey, f.issuer, "node:"+nodeID, f.audience, f.tokenTTL)
		if err != nil {
			return nil, err
		}
		token = st
	}
	return client.New(client.Options{Endpoint: f.endpoint, CAFile: f.caFile, Token: token, Timeout: f.timeout})
}

// encrypt is envelope.Command on stdin and stdout.
func encrypt(args []string) error {
	return envelope.Command("csi-rclone encrypt", args, os.Stdin, os.Stdout)
}
