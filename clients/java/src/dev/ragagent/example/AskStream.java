package dev.ragagent.example;

import com.google.gson.JsonArray;
import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import com.google.protobuf.Any;
import com.google.protobuf.InvalidProtocolBufferException;
import com.google.protobuf.MessageOrBuilder;
import com.google.protobuf.util.JsonFormat;
import com.google.rpc.BadRequest;
import com.google.rpc.ErrorInfo;
import dev.ragagent.v1.AgentServiceGrpc;
import dev.ragagent.v1.AskStreamResponse;
import dev.ragagent.v1.QuestionRequest;
import io.grpc.ManagedChannel;
import io.grpc.ManagedChannelBuilder;
import io.grpc.Metadata;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import io.grpc.netty.GrpcSslContexts;
import io.grpc.netty.NettyChannelBuilder;
import io.grpc.protobuf.StatusProto;
import io.grpc.stub.MetadataUtils;
import io.netty.handler.ssl.SslContextBuilder;
import java.io.File;
import java.io.IOException;
import java.util.Iterator;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;

/**
 * Asks ragagent one question over AskStream and prints the run as JSON lines: the Java example
 * of docs/clients.md, built against code from clients/java/buf.gen.yaml.
 *
 * <pre>
 * java dev.ragagent.example.AskStream [--address HOST:PORT] [--deadline SECONDS]
 *     [--request-id ID] [--max-results N] [--tls-ca CA.pem [--tls-cert ME.pem --tls-key ME.key]
 *     [--tls-server-name NAME]] QUESTION
 * </pre>
 *
 * <p>With --tls-ca the call goes over TLS, trusting that CA (the server's); --tls-cert and
 * --tls-key (PKCS#8 PEM) add a client certificate for mutual TLS. An API key or JWT in
 * RAGAGENT_API_KEY is sent as "authorization: Bearer ..." on every call. TLS needs ALPN (h2):
 * grpc-netty gets it from OpenSSL through netty-tcnative (Debian: libnetty-tcnative-java and
 * libnetty-tcnative-jni), since netty 4.1.48 finds none in JDK 17.
 *
 * <p>Output: {"event": AskStreamResponse} per message (proto3 JSON), then {"headers": {...},
 * "trailers": {...}} with the x-request-id the server sent. When the call fails: one line
 * {"error": {"code", "codeName", "message", "requestId", "errorInfo", "badRequest"}} decoded
 * from the status details, and exit code 3.
 */
public final class AskStream {
  private static final Metadata.Key<String> REQUEST_ID =
      Metadata.Key.of("x-request-id", Metadata.ASCII_STRING_MARSHALLER);
  private static final Metadata.Key<String> AUTHORIZATION =
      Metadata.Key.of("authorization", Metadata.ASCII_STRING_MARSHALLER);
  private static final JsonFormat.Printer JSON =
      JsonFormat.printer().omittingInsignificantWhitespace();
  private static final int EXIT_USAGE = 2;
  private static final int EXIT_RPC_ERROR = 3;

  private AskStream() {}

  public static void main(String[] args) throws Exception {
    String address = "127.0.0.1:50051";
    long deadlineSeconds = 30;
    String requestId = null;
    int maxResults = 0;
    String query = null;
    String ca = null;
    String cert = null;
    String key = null;
    String serverName = null;
    for (int i = 0; i < args.length; i++) {
      switch (args[i]) {
        case "--address" -> address = args[++i];
        case "--deadline" -> deadlineSeconds = Long.parseLong(args[++i]);
        case "--request-id" -> requestId = args[++i];
        case "--max-results" -> maxResults = Integer.parseInt(args[++i]);
        case "--tls-ca" -> ca = args[++i];
        case "--tls-cert" -> cert = args[++i];
        case "--tls-key" -> key = args[++i];
        case "--tls-server-name" -> serverName = args[++i];
        default -> query = args[i];
      }
    }
    if (query == null || (cert == null) != (key == null)) {
      System.err.println("usage: AskStream [--address HOST:PORT] [--deadline S] "
          + "[--tls-ca CA [--tls-cert CERT --tls-key KEY]] QUESTION");
      System.exit(EXIT_USAGE);
    }
    ManagedChannel channel = channel(address, ca, cert, key, serverName);
    String apiKey = System.getenv("RAGAGENT_API_KEY");
    System.exit(run(channel, apiKey, deadlineSeconds, requestId, maxResults, query));
  }

  /** TLS trusting {@code ca} (plus a client certificate), else plaintext (a loopback server). */
  static ManagedChannel channel(String address, String ca, String cert, String key,
      String serverName) throws IOException {
    if (ca == null) {
      return ManagedChannelBuilder.forTarget(address).usePlaintext().build();
    }
    SslContextBuilder tls = GrpcSslContexts.forClient().trustManager(new File(ca));
    if (cert != null) {
      tls.keyManager(new File(cert), new File(key));
    }
    NettyChannelBuilder builder = NettyChannelBuilder.forTarget(address).sslContext(tls.build());
    if (serverName != null) {
      builder.overrideAuthority(serverName);
    }
    return builder.build();
  }

  static int run(ManagedChannel channel, String apiKey, long deadlineSeconds, String requestId,
      int maxResults, String query) throws InvalidProtocolBufferException, InterruptedException {
    try {
      Metadata outgoing = new Metadata();
      if (requestId != null) {
        outgoing.put(REQUEST_ID, requestId);
      }
      if (apiKey != null && !apiKey.isEmpty()) {
        outgoing.put(AUTHORIZATION, "Bearer " + apiKey);
      }
      AtomicReference<Metadata> headers = new AtomicReference<>();
      AtomicReference<Metadata> trailers = new AtomicReference<>();
      // The deadline travels to the server as grpc-timeout; the request id as a header.
      AgentServiceGrpc.AgentServiceBlockingStub stub = AgentServiceGrpc.newBlockingStub(channel)
          .withDeadlineAfter(deadlineSeconds, TimeUnit.SECONDS)
          .withInterceptors(
              MetadataUtils.newAttachHeadersInterceptor(outgoing),
              MetadataUtils.newCaptureMetadataInterceptor(headers, trailers));
      QuestionRequest.Builder request = QuestionRequest.newBuilder().setQuery(query);
      if (maxResults != 0) {
        request.setMaxResults(maxResults);
      }
      try {
        Iterator<AskStreamResponse> events = stub.askStream(request.build());
        while (events.hasNext()) {
          JsonObject line = new JsonObject();
          line.add("event", JsonParser.parseString(JSON.print(events.next())));
          System.out.println(line);
        }
      } catch (StatusRuntimeException e) {
        System.out.println(errorJson(e));
        return EXIT_RPC_ERROR;
      }
      JsonObject line = new JsonObject();
      line.add("headers", requestIdOnly(headers.get()));
      line.add("trailers", requestIdOnly(trailers.get()));
      System.out.println(line);
      return 0;
    } finally {
      channel.shutdownNow().awaitTermination(5, TimeUnit.SECONDS);
    }
  }

  /** The status, the request id and the google.rpc details of a failed call. */
  static JsonObject errorJson(StatusRuntimeException e) throws InvalidProtocolBufferException {
    Status status = e.getStatus();
    JsonObject error = new JsonObject();
    error.addProperty("code", status.getCode().value());
    error.addProperty("codeName", status.getCode().name());
    error.addProperty("message", status.getDescription());
    Metadata trailers = Status.trailersFromThrowable(e);
    error.addProperty("requestId", trailers == null ? null : trailers.get(REQUEST_ID));
    JsonArray errorInfo = new JsonArray();
    JsonArray badRequest = new JsonArray();
    // grpc-status-details-bin as a google.rpc.Status; null when the server sent none.
    com.google.rpc.Status details = StatusProto.fromThrowable(e);
    if (details != null) {
      for (Any any : details.getDetailsList()) {
        if (any.is(ErrorInfo.class)) {
          errorInfo.add(toJson(any.unpack(ErrorInfo.class)));
        } else if (any.is(BadRequest.class)) {
          badRequest.add(toJson(any.unpack(BadRequest.class)));
        }
      }
    }
    error.add("errorInfo", errorInfo);
    error.add("badRequest", badRequest);
    JsonObject line = new JsonObject();
    line.add("error", error);
    return line;
  }

  private static JsonObject requestIdOnly(Metadata metadata) {
    JsonObject out = new JsonObject();
    if (metadata != null && metadata.get(REQUEST_ID) != null) {
      out.addProperty("x-request-id", metadata.get(REQUEST_ID));
    }
    return out;
  }

  private static JsonObject toJson(MessageOrBuilder message) throws InvalidProtocolBufferException {
    return JsonParser.parseString(JSON.print(message)).getAsJsonObject();
  }
}
