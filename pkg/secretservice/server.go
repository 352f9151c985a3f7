// Package secretservice is the reference secret service: it decrypts the
// envelope-encrypted values of a stage secret for an authenticated CSI
// driver, over gRPC and HTTP/JSON (proto/secretservice/v1).
//
// A bound (v2) value is only decrypted where it was sealed for: its
// namespace must be the request's PVC namespace, its option the option the
// driver sets it as, and its host (if it names one) the host of that
// remote. The check reads the value's context without the key, so a value
// used elsewhere is refused (PermissionDenied) before anything is
// decrypted; a tampered one fails to open (InvalidArgument).
package secretservice

import (
	"context"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"unicode/utf8"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"k8s.io/klog/v2"

	"github.com/csi-rclone/csi-rclone/pkg/envelope"
	pb "github.com/csi-rclone/csi-rclone/proto/secretservice/v1"
)

// maxBody bounds an HTTP request; a stage secret is a few kilobytes.
const maxBody = 1 << 20

// Options configure a Server.
type Options struct {
	// PrivateKey opens the envelopes.
	PrivateKey *rsa.PrivateKey
	// PreviousKeys open envelopes sealed before a key rotation, until every
	// Secret (and every staged volume's record) holds values sealed anew.
	PreviousKeys []*rsa.PrivateKey
	// Verifier authenticates callers.
	Verifier Verifier
	// AllowedNamespaces restricts the PVC namespaces a caller may decrypt
	// for; empty allows any.
	AllowedNamespaces []string
	// AllowedSubjects restricts the callers; empty allows any authenticated
	// subject.
	AllowedSubjects []string
	// AllowUnbound accepts v1 values, which name no context: anyone who can
	// copy one into a stage secret (another namespace, another remote) has
	// it decrypted there. Weaker; only while values are re-encrypted.
	AllowUnbound bool
}

// Server implements pb.SecretServiceServer and its HTTP/JSON form.
type Server struct {
	pb.UnimplementedSecretServiceServer
	o Options
}

// New makes a Server.
func New(o Options) *Server { return &Server{o: o} }

// Register serves the gRPC service on g.
func (s *Server) Register(g *grpc.Server) { pb.RegisterSecretServiceServer(g, s) }

// Decrypt implements pb.SecretServiceServer; the token is in the
// "authorization: Bearer" metadata.
func (s *Server) Decrypt(ctx context.Context, req *pb.DecryptRequest) (*pb.DecryptResponse, error) {
	var header string
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		if v := md.Get("authorization"); len(v) > 0 {
			header = v[0]
		}
	}
	return s.decrypt(ctx, "grpc", header, req)
}

// decrypt is the logic both transports share. Every decision is logged,
// never a ciphertext, plaintext or token.
func (s *Server) decrypt(ctx context.Context, transport, authHeader string, req *pb.DecryptRequest) (resp *pb.DecryptResponse, err error) {
	subject := ""
	defer func() {
		kv := []any{"transport", transport, "subject", subject, "volumeID", req.GetVolumeId(),
			"pvcNamespace", req.GetPvcNamespace(), "pvcName", req.GetPvcName(), "values", len(req.GetCiphertexts())}
		if err != nil {
			kv = append(kv, "outcome", status.Code(err).String(), "reason", status.Convert(err).Message())
		} else {
			kv = append(kv, "outcome", "OK")
		}
		klog.InfoS("Decrypt", kv...)
	}()

	token, ok := bearer(authHeader)
	if !ok {
		return nil, status.Error(codes.Unauthenticated, "missing bearer token")
	}
	// The verifier's errors name what is wrong with the token (expired,
	// audience, signature), never the token itself.
	if subject, err = s.o.Verifier.Verify(ctx, token); err != nil {
		subject = ""
		return nil, status.Errorf(codes.Unauthenticated, "invalid token: %v", err)
	}
	if len(s.o.AllowedSubjects) > 0 && !slices.Contains(s.o.AllowedSubjects, subject) {
		return nil, status.Errorf(codes.PermissionDenied, "subject %q may not decrypt", subject)
	}
	if ns := req.GetPvcNamespace(); len(s.o.AllowedNamespaces) > 0 && !slices.Contains(s.o.AllowedNamespaces, ns) {
		if ns == "" {
			return nil, status.Error(codes.PermissionDenied, "decryption is restricted to some namespaces and the request names none")
		}
		return nil, status.Errorf(codes.PermissionDenied, "namespace %q is not allowed", ns)
	}
	if len(req.GetCiphertexts()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "no ciphertexts")
	}

	ids := slices.Sorted(maps.Keys(req.GetCiphertexts()))
	values := make(map[string]*envelope.Value, len(ids))
	var bad []string
	for _, id := range ids {
		ct := req.GetCiphertexts()[id]
		if !envelope.IsEncrypted(ct) {
			ct = envelope.PrefixV1 + ct // earlier drivers sent v1 without its prefix
		}
		v, err := envelope.Parse(ct)
		if err != nil {
			bad = append(bad, id)
			continue
		}
		values[id] = v
	}
	if len(bad) > 0 {
		return nil, status.Errorf(codes.InvalidArgument, "cannot decrypt %s: %v", strings.Join(bad, ", "), envelope.ErrMalformed)
	}
	if err := s.checkContexts(req, ids, values); err != nil {
		return nil, err
	}
	out := make(map[string]string, len(ids))
	for _, id := range ids {
		pt, err := s.open(values[id])
		// A proto3 string must be UTF-8; a binary value could not be sent back.
		if err != nil || !utf8.Valid(pt) {
			bad = append(bad, id)
			continue
		}
		out[id] = string(pt)
	}
	if len(bad) > 0 {
		return nil, status.Errorf(codes.InvalidArgument, "cannot decrypt %s: %v, or not UTF-8", strings.Join(bad, ", "), envelope.ErrMalformed)
	}
	return &pb.DecryptResponse{Plaintexts: out}, nil
}

// bearer takes the token from an "Authorization: Bearer <token>" value; the
// scheme is case-insensitive (RFC 6750).
func bearer(header string) (string, bool) {
	scheme, token, ok := strings.Cut(strings.TrimSpace(header), " ")
	token = strings.TrimSpace(token)
	return token, ok && strings.EqualFold(scheme, "Bearer") && token != ""
}

// HTTPHandler serves POST /v1/decrypt with the protojson encoding of the
// messages; errors are {"code": "<gRPC code name>", "message": "..."}.
func (s *Server) HTTPHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/decrypt", s.serveDecrypt)
	return mux
}

func (s *Server) serveDecrypt(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		writeError(w, http.StatusMethodNotAllowed, codes.Unimplemented, "use POST")
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		if mbe := (*http.MaxBytesError)(nil); errors.As(err, &mbe) {
			writeStatus(w, status.Errorf(codes.InvalidArgument, "request body exceeds %d bytes", maxBody))
			return
		}
		writeStatus(w, status.Errorf(codes.InvalidArgument, "reading the request: %v", err))
		return
	}
	req := &pb.DecryptRequest{}
	// Unknown fields are dropped, as gRPC does, so newer clients still work.
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(body, req); err != nil {
		writeStatus(w, status.Errorf(codes.InvalidArgument, "decoding the request: %v", err))
		return
	}
	resp, err := s.decrypt(r.Context(), "http", r.Header.Get("Authorization"), req)
	if err != nil {
		writeStatus(w, err)
		return
	}
	data, err := protojson.Marshal(resp)
	if err != nil {
		writeStatus(w, status.Errorf(codes.Internal, "encoding the answer: %v", err))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store") // the body is plaintext credentials
	_, _ = w.Write(data)
}

func writeStatus(w http.ResponseWriter, err error) {
	st := status.Convert(err)
	code := http.StatusInternalServerError
	switch st.Code() {
	case codes.InvalidArgument:
		code = http.StatusBadRequest
	case codes.Unauthenticated:
		code = http.StatusUnauthorized
		w.Header().Set("WWW-Authenticate", "Bearer")
	case codes.PermissionDenied:
		code = http.StatusForbidden
	}
	writeError(w, code, st.Code(), st.Message())
}

func writeError(w http.ResponseWriter, httpStatus int, code codes.Code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(httpStatus)
	_ = json.NewEncoder(w).Encode(struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	}{code.String(), msg})
}

// checkContexts refuses the request when a value is used outside the
// context it was sealed for, or is unbound and those are not accepted. The
// message names each value and what differs, never a plaintext.
func (s *Server) checkContexts(req *pb.DecryptRequest, ids []string, values map[string]*envelope.Value) error {
	var denied []string
	for _, id := range ids {
		v := values[id]
		if v.Context == nil {
			if !s.o.AllowUnbound {
				denied = append(denied, id+": unbound ciphertext; re-encrypt with a context")
			}
			continue
		}
		use := req.GetContexts()[id]
		host, err := envelope.NormalizeHost(use.GetHost())
		if err != nil {
			host = "" // unknown: matches only a value sealed for any host
		}
		if err := v.Context.Permits(envelope.Context{Namespace: req.GetPvcNamespace(), Option: use.GetOption(), Host: host}); err != nil {
			denied = append(denied, id+": "+err.Error())
		}
	}
	if len(denied) > 0 {
		return status.Error(codes.PermissionDenied, strings.Join(denied, "; "))
	}
	return nil
}

// open tries the current key, then the previous ones.
func (s *Server) open(v *envelope.Value) ([]byte, error) {
	pt, err := v.Open(s.o.PrivateKey)
	for _, k := range s.o.PreviousKeys {
		if err == nil {
			break
		}
		pt, err = v.Open(k)
	}
	return pt, err
}
