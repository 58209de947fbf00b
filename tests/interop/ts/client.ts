// TypeScript client for ragagent on connect-es over gRPC: proves that a TypeScript team can
// call the service with code that buf + protoc-gen-es generate from the repository's protos
// (clients/typescript/buf.gen.yaml), and read its rich errors. Used by
// tests/interop/test_ts_client.py, which generates gen/, compiles to dist/ with tsc and runs
//   node dist/client.js [--address HOST:PORT] [--deadline SECONDS] [--request-id ID]
//     [--tls-ca CA.pem [--tls-cert ME.pem --tls-key ME.key] [--tls-server-name NAME]] COMMAND JSON
//
// With --tls-ca the call goes over TLS (https), trusting that CA (the server's); --tls-cert and
// --tls-key add a client certificate for mutual TLS. An API key or JWT in RAGAGENT_API_KEY is
// sent as "authorization: Bearer ..." on every call (an interceptor).
//
// Commands (JSON is the request in proto3 JSON, e.g. {"query": "...", "maxResults": 3}):
//   retrieve     AgentService/Retrieve: prints {"response": RetrieveResponse}
//   ask-stream   AgentService/AskStream: prints {"event": AskStreamResponse} per message
// Then one line {"headers": {...}, "trailers": {...}} with the x-request-id the server sent.
//
// Exit codes: 0 the call succeeded; 2 usage error; 3 the call failed, after one line
//   {"error": {"code": <gRPC code>, "codeName": ..., "message": ..., "requestId": ...,
//              "errorInfo": [ErrorInfo...], "badRequest": [BadRequest...]}}
// where the details are decoded from grpc-status-details-bin with the generated
// google.rpc types (gen/ts/google/rpc/error_details_pb.ts) through ConnectError.findDetails.

import { toJson, fromJson, type JsonObject } from "@bufbuild/protobuf";
import { readFileSync } from "node:fs";

import {
  type CallOptions,
  Code,
  ConnectError,
  createClient,
  type Interceptor,
} from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";

import { BadRequestSchema, ErrorInfoSchema } from "./gen/ts/google/rpc/error_details_pb.js";
import {
  AgentService,
  AskStreamResponseSchema,
  QuestionRequestSchema,
  RetrieveRequestSchema,
  RetrieveResponseSchema,
} from "./gen/ts/ragagent/v1/agent_pb.js";

const EXIT_USAGE = 2;
const EXIT_RPC_ERROR = 3;

class UsageError extends Error {}

interface Options {
  address: string;
  deadlineMs: number;
  requestId?: string;
  tlsCa?: string;
  tlsCert?: string;
  tlsKey?: string;
  tlsServerName?: string;
  command: string;
  request: JsonObject;
}

function parseArgs(argv: string[]): Options {
  let address = "127.0.0.1:50051";
  let deadlineMs = 30_000;
  let requestId: string | undefined;
  const tls: Pick<Options, "tlsCa" | "tlsCert" | "tlsKey" | "tlsServerName"> = {};
  const rest: string[] = [];
  for (let i = 0; i < argv.length; i += 1) {
    const arg = argv[i] as string;
    const value = (): string => {
      i += 1;
      const next = argv[i];
      if (next === undefined) throw new UsageError(`${arg} needs a value`);
      return next;
    };
    if (arg === "--address") address = value();
    else if (arg === "--deadline") {
      const seconds = Number(value());
      if (!Number.isFinite(seconds) || seconds <= 0) {
        throw new UsageError("--deadline must be a positive number of seconds");
      }
      deadlineMs = seconds * 1000;
    } else if (arg === "--request-id") requestId = value();
    else if (arg === "--tls-ca") tls.tlsCa = value();
    else if (arg === "--tls-cert") tls.tlsCert = value();
    else if (arg === "--tls-key") tls.tlsKey = value();
    else if (arg === "--tls-server-name") tls.tlsServerName = value();
    else if (arg.startsWith("--")) throw new UsageError(`unknown option ${arg}`);
    else rest.push(arg);
  }
  if (rest.length !== 2) throw new UsageError("expected COMMAND JSON");
  let request: unknown;
  try {
    request = JSON.parse(rest[1] as string);
  } catch (error) {
    throw new UsageError(`the request is not valid JSON: ${(error as Error).message}`);
  }
  if (request === null || typeof request !== "object" || Array.isArray(request)) {
    throw new UsageError("the request must be a JSON object");
  }
  if ((tls.tlsCert === undefined) !== (tls.tlsKey === undefined)) {
    throw new UsageError("--tls-cert and --tls-key go together");
  }
  return {
    address,
    deadlineMs,
    requestId,
    ...tls,
    command: rest[0] as string,
    request: request as JsonObject,
  };
}

function print(value: unknown): void {
  process.stdout.write(`${JSON.stringify(value)}\n`);
}

function headersToJson(headers: Headers | undefined): Record<string, string> {
  const out: Record<string, string> = {};
  headers?.forEach((value, key) => {
    if (!key.endsWith("-bin")) out[key] = value;
  });
  return out;
}

// The rich error: status code and message, the request id, and the google.rpc details.
function errorToJson(error: ConnectError): JsonObject {
  return {
    code: error.code,
    codeName: Code[error.code],
    message: error.rawMessage,
    requestId: error.metadata.get("x-request-id"),
    errorInfo: error.findDetails(ErrorInfoSchema).map((d) => toJson(ErrorInfoSchema, d)),
    badRequest: error.findDetails(BadRequestSchema).map((d) => toJson(BadRequestSchema, d)),
  };
}

async function run(options: Options): Promise<void> {
  // An API key or JWT on every call, as `authorization: Bearer`.
  const apiKey = process.env.RAGAGENT_API_KEY;
  const bearer: Interceptor = (next) => async (req) => {
    if (apiKey) req.header.set("authorization", `Bearer ${apiKey}`);
    return await next(req);
  };
  const tls = options.tlsCa !== undefined;
  const transport = createGrpcTransport({
    baseUrl: `${tls ? "https" : "http"}://${options.address}`,
    interceptors: [bearer],
    // Passed to node's http2.connect: the CA to trust and, for mutual TLS, our certificate.
    nodeOptions: tls
      ? {
          ca: readFileSync(options.tlsCa as string),
          ...(options.tlsCert === undefined
            ? {}
            : { cert: readFileSync(options.tlsCert), key: readFileSync(options.tlsKey as string) }),
          ...(options.tlsServerName === undefined ? {} : { servername: options.tlsServerName }),
        }
      : {},
  });
  const client = createClient(AgentService, transport);
  let headers: Headers | undefined;
  let trailers: Headers | undefined;
  // The deadline (sent as grpc-timeout) and the request id (echoed in headers and trailers).
  const callOptions: CallOptions = {
    timeoutMs: options.deadlineMs,
    headers: options.requestId === undefined ? [] : [["x-request-id", options.requestId]],
    onHeader: (h: Headers) => {
      headers = h;
    },
    onTrailer: (t: Headers) => {
      trailers = t;
    },
  };
  switch (options.command) {
    case "retrieve": {
      const request = fromJson(RetrieveRequestSchema, options.request);
      const response = await client.retrieve(request, callOptions);
      print({ response: toJson(RetrieveResponseSchema, response) });
      break;
    }
    case "ask-stream": {
      const request = fromJson(QuestionRequestSchema, options.request);
      for await (const event of client.askStream(request, callOptions)) {
        print({ event: toJson(AskStreamResponseSchema, event) });
      }
      break;
    }
    default:
      throw new UsageError(`unknown command ${JSON.stringify(options.command)}`);
  }
  print({ headers: headersToJson(headers), trailers: headersToJson(trailers) });
}

async function main(): Promise<number> {
  try {
    await run(parseArgs(process.argv.slice(2)));
    return 0;
  } catch (error) {
    if (error instanceof UsageError) {
      process.stderr.write(`client: ${error.message}\n`);
      return EXIT_USAGE;
    }
    print({ error: errorToJson(ConnectError.from(error)) });
    return EXIT_RPC_ERROR;
  }
}

process.exitCode = await main();
