// Command ragagent-ask asks ragagent one question over AskStream and prints the run as JSON
// lines: the Go example of docs/clients.md, built against code from clients/go/buf.gen.yaml.
//
//	ragagent-ask [-address 127.0.0.1:50051] [-deadline SECONDS] [-request-id ID] \
//	             [-max-results N] QUESTION
//
// Output: {"event": AskStreamResponse} per message (proto3 JSON), then
// {"headers": {...}, "trailers": {...}} with the x-request-id the server sent. When the call
// fails: one line {"error": {"code", "codeName", "message", "requestId", "errorInfo",
// "badRequest"}} decoded from the status details, and exit code 3.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
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
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: ragagent-ask [flags] QUESTION")
		os.Exit(2)
	}
	timeout := time.Duration(*deadline * float64(time.Second))
	os.Exit(run(*address, timeout, *requestID, int32(*maxResults), flag.Arg(0)))
}

func run(address string, deadline time.Duration, requestID string, maxResults int32, query string) int {
	// Plaintext, as the server listens by default. (grpc.WithInsecure still exists in current
	// grpc-go; from 1.34 on, grpc.WithTransportCredentials(insecure.NewCredentials()) says the
	// same.)
	conn, err := grpc.Dial(address, grpc.WithInsecure())
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
