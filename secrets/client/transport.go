package client

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"net/http"

	"github.com/go-resty/resty/v2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	pb "github.com/csi-rclone/csi-rclone/proto/secretservice/v1"
)

type grpcTransport struct {
	conn *grpc.ClientConn
	c    pb.SecretServiceClient
}

func newGRPC(target string, tlsConf *tls.Config) (*grpcTransport, error) {
	creds := insecure.NewCredentials()
	if tlsConf != nil {
		creds = credentials.NewTLS(tlsConf)
	}
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(creds))
	if err != nil {
		return nil, err
	}
	return &grpcTransport{conn: conn, c: pb.NewSecretServiceClient(conn)}, nil
}

func (g *grpcTransport) decrypt(ctx context.Context, token string, req *pb.DecryptRequest) (*pb.DecryptResponse, error) {
	ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
	return g.c.Decrypt(ctx, req)
}

func (g *grpcTransport) close() error { return g.conn.Close() }

// httpTransport speaks the same messages as JSON, for services that speak
// HTTP (as Renku's data services do).
type httpTransport struct {
	url string
	c   *resty.Client
}

func newHTTP(url string, tlsConf *tls.Config) *httpTransport {
	c := resty.New().SetHeader("Content-Type", "application/json")
	if tlsConf != nil {
		c.SetTLSClientConfig(tlsConf)
	}
	return &httpTransport{url: url, c: c}
}

func (h *httpTransport) decrypt(ctx context.Context, token string, req *pb.DecryptRequest) (*pb.DecryptResponse, error) {
	body, err := protojson.Marshal(req)
	if err != nil {
		return nil, err
	}
	resp, err := h.c.R().SetContext(ctx).SetAuthToken(token).SetBody(body).Post(h.url)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return nil, status.Error(codes.DeadlineExceeded, err.Error())
		}
		return nil, status.Errorf(codes.Unavailable, "%v", err)
	}
	if resp.StatusCode() != http.StatusOK {
		return nil, httpError(resp.StatusCode(), resp.Body())
	}
	out := &pb.DecryptResponse{}
	if err := protojson.Unmarshal(resp.Body(), out); err != nil {
		return nil, status.Errorf(codes.Internal, "decoding the answer: %v", err)
	}
	return out, nil
}

func (h *httpTransport) close() error { return nil }

// httpError turns an error answer into a status: the body's code where it
// names one, else the HTTP status.
func httpError(httpStatus int, body []byte) error {
	var e struct{ Code, Message string }
	_ = json.Unmarshal(body, &e)
	if e.Message == "" {
		e.Message = http.StatusText(httpStatus)
	}
	code := codes.Unknown
	var c codes.Code
	if err := c.UnmarshalJSON([]byte(`"` + upperSnake(e.Code) + `"`)); err == nil && e.Code != "" {
		code = c
	} else {
		switch {
		case httpStatus == http.StatusBadRequest:
			code = codes.InvalidArgument
		case httpStatus == http.StatusUnauthorized:
			code = codes.Unauthenticated
		case httpStatus == http.StatusForbidden:
			code = codes.PermissionDenied
		case httpStatus == http.StatusTooManyRequests, httpStatus == http.StatusBadGateway,
			httpStatus == http.StatusServiceUnavailable, httpStatus == http.StatusGatewayTimeout:
			code = codes.Unavailable
		}
	}
	return status.Error(code, e.Message)
}

// upperSnake turns "PermissionDenied" into "PERMISSION_DENIED", the form
// codes.Code parses; an already upper-case name stays as it is.
func upperSnake(s string) string {
	var b []byte
	for i := 0; i < len(s); i++ {
		ch := s[i]
		if ch >= 'A' && ch <= 'Z' && i > 0 && s[i-1] >= 'a' && s[i-1] <= 'z' {
			b = append(b, '_')
		}
		if ch >= 'a' && ch <= 'z' {
			ch -= 'a' - 'A'
		}
		b = append(b, ch)
	}
	return string(b)
}
