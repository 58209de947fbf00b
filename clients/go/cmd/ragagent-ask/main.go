// Command ragagent-ask asks ragagent one question over AskStream and prints the run as JSON
// lines: the Go example of docs/clients.md, built against code from clients/go/buf.gen.yaml.
//
//	ragagent-ask [-address 127.0.0.1:50051] [-deadline SECONDS] [-request-id ID] \
//	             [-max-results N] [-tls-ca CA.pem [-tls-cert ME.pem -tls-key ME.key]
//	             [-tls-server-name NAME]] QUESTION
//
// With -tls-ca the call goes over TLS, trusting that CA (the server's); -tls-cert and -tls-key
// add a client certificate for mutual TLS. An API key or JWT in RAGAGENT_API_KEY is sent as
// "authorization: Bearer ..." on every call, over TLS only.
//
// Output: {"event": AskStreamResponse} per message (proto3 JSON), then
// {"headers": {...}, "trailers": {...}} with the x-request-id the server sent. When the call
// fails: one line {"error": {"code", "codeName", "message", "requestId", "errorInfo",
// "badRequest"}} decoded from the status details, and exit code 3.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	ragagentv1 "github.com/ragagent/ragagent/gen/go/ragagent/v1"
)

const exitRPCError = 3

func main() {
	address := flag.String("address", "127.0.0.1:50051", "server address")
	deadline := flag.Float64("deadline", 30, "deadline of the call, in seconds")
	requestID := flag.String("request-id", "", "x-request-id to send (empty: the server makes one)")
	maxResults := flag.Int("max-results", 0, "sources per search (0: the server's default)")
	caFile := flag.String("tls-ca", "", "PEM CA that signed the server's certificate (TLS)")
	certFile := flag.String("tls-cert", "", "PEM client certificate (mutual TLS)")
	keyFile := flag.String("tls-key", "", "PEM key of -tls-cert")
	serverName := flag.String("tls-server-name", "", "name in the server's certificate (default: the host)")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: ragagent-ask [flags] QUESTION")
		os.Exit(2)
	}
	options, err := dialOptions(*caFile, *certFile, *keyFile, *serverName, os.Getenv("RAGAGENT_API_KEY"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "ragagent-ask:", err)
		os.Exit(2)
	}
	timeout := time.Duration(*deadline * float64(time.Second))
	os.Exit(run(*address, options, timeout, *requestID, int32(*maxResults), flag.Arg(0)))
}

// bearer sends an API key (or a JWT) with every call, and refuses to over plaintext.
type bearer string

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}

func (bearer) RequireTransportSecurity() bool { return true }

// dialOptions: TLS trusting caFile (plus a client certificate for mutual TLS) and the key as
// call credentials; plaintext without caFile, as a server on loopback listens by default.
func dialOptions(caFile, certFile, keyFile, serverName, apiKey string) ([]grpc.DialOption, error) {
	if caFile == "" {
		// grpc.WithInsecure still exists in current grpc-go; from 1.34 on,
		// grpc.WithTransportCredentials(insecure.NewCredentials()) says the same.
		return []grpc.DialOption{grpc.WithInsecure()}, nil
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, err
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("no PEM certificate in %s", caFile)
	}
	config := &tls.Config{RootCAs: roots, ServerName: serverName, MinVersion: tls.VersionTLS12}
	if certFile != "" {
		pair, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, err
		}
		config.Certificates = []tls.Certificate{pair}
	}
	options := []grpc.DialOption{grpc.WithTransportCredentials(credentials.NewTLS(config))}
	if apiKey != "" {
		options = append(options, grpc.WithPerRPCCredentials(bearer(apiKey)))
	}
	return options, nil
}

func run(address string, options []grpc.DialOption, deadline time.Duration, requestID string, maxResults int32, query string) int {
	conn, err := grpc.Dial(address, options...)
	if err != nil {
		return fail(err, nil)
	}
	defer conn.Close()
	client := ragagentv1.NewAgentServiceClient(conn)

	// The deadline travels to the server as grpc-timeout; the request id as a header.
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	if requestID != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "x-request-id", requestID)
	}
	request := &ragagentv1.QuestionRequest{Query: query}
	if maxResults != 0 {
		request.MaxResults = &maxResults
	}
	stream, err := client.AskStream(ctx, request)
	if err != nil {
		return fail(err, nil)
	}
	for {
		event, err := stream.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			return fail(err, stream.Trailer())
		}
		body, err := protojson.Marshal(event)
		if err != nil {
			return fail(err, nil)
		}
		printJSON(map[string]json.RawMessage{"event": body})
	}
	headers, _ := stream.Header()
	printJSON(map[string]map[string]string{
		"headers":  flatten(headers),
		"trailers": flatten(stream.Trailer()),
	})
	return 0
}

// fail prints the status, the request id from the trailers and the google.rpc details
// (ErrorInfo, BadRequest) of err.
func fail(err error, trailers metadata.MD) int {
	st := status.Convert(err)
	out := map[string]interface{}{
		"code":       int(st.Code()),
		"codeName":   st.Code().String(),
		"message":    st.Message(),
		"requestId":  flatten(trailers)["x-request-id"],
		"errorInfo":  []interface{}{},
		"badRequest": []interface{}{},
	}
	for _, detail := range st.Details() {
		switch d := detail.(type) {
		case *errdetails.ErrorInfo:
			out["errorInfo"] = append(out["errorInfo"].([]interface{}), map[string]interface{}{
				"reason": d.GetReason(), "domain": d.GetDomain(), "metadata": d.GetMetadata(),
			})
		case *errdetails.BadRequest:
			violations := []map[string]string{}
			for _, v := range d.GetFieldViolations() {
				violations = append(violations, map[string]string{
					"field": v.GetField(), "description": v.GetDescription(),
				})
			}
			out["badRequest"] = append(out["badRequest"].([]interface{}), map[string]interface{}{
				"fieldViolations": violations,
			})
		}
	}
	printJSON(map[string]interface{}{"error": out})
	return exitRPCError
}

func flatten(md metadata.MD) map[string]string {
	out := map[string]string{}
	for key, values := range md {
		if len(values) > 0 && !strings.HasSuffix(key, "-bin") {
			out[key] = values[0]
		}
	}
	return out
}

func printJSON(value interface{}) {
	line, err := json.Marshal(value)
	if err != nil {
		panic(err)
	}
	fmt.Println(string(line))
}
