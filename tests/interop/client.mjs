#!/usr/bin/env node
// Node.js gRPC client for ragagent: proves that a non-Python client can call the service
// from the .proto files alone (used by tests/interop/test_node_client.py).
//
// Setup (once, needs the npm registry; run `make setup` first for .cache/protos):
//   cd tests/interop && npm ci --no-audit --no-fund --ignore-scripts
//
// Usage:
//   node tests/interop/client.mjs [--address HOST:PORT] [--deadline SECONDS]
//                                 [--header KEY=VALUE]... [--tls-ca FILE]
//                                 [--tls-cert FILE --tls-key FILE] [--api-key KEY]
//                                 COMMAND [JSON]
//
//   --address    server address (default 127.0.0.1:50051)
//   --deadline   deadline of the call in seconds (default 30)
//   --header     request metadata, repeatable (e.g. --header x-request-id=abc)
//   --tls-ca     connect over TLS, trusting the CA certificates of FILE (PEM); without it,
//                the connection is plaintext (unless --tls-cert is given: then system CAs)
//   --tls-cert, --tls-key
//                a client certificate and its key (PEM) for mutual TLS
//   --api-key    send `authorization: Bearer KEY` on every call (default: the
//                RAGAGENT_API_KEY environment variable, as for the `ragagent` commands);
//                over TLS as call credentials, over plaintext as a request header
//
// Commands (JSON is the request message in proto field names, e.g. {"max_results": 3}):
//   health [JSON]       grpc.health.v1.Health/Check; JSON defaults to {"service": ""};
//                       prints {"status": "SERVING"}
//   retrieve JSON       ragagent.v1.AgentService/Retrieve; prints the RetrieveResponse
//   ask JSON            ragagent.v1.AgentService/Ask; prints the AgentResponse
//   ask-stream JSON     ragagent.v1.AgentService/AskStream; prints each AskStreamResponse
//                       as one JSON line (the `event` key names the oneof member that is set)
//   list-documents [JSON]
//                       ragagent.v1.CorpusService/ListDocuments; prints the response
//   corpus-stats        ragagent.v1.CorpusService/GetCorpusStats; prints the response
//
// Output and exit codes:
//   0  success: the response as JSON on stdout (64-bit integers as strings, enums as names)
//   2  usage error: a message on stderr
//   3  the call failed: one JSON line on stdout,
//        {"code": <grpc status number>, "details": "<status message>", "metadata": {...}}
//      where metadata is the trailing metadata (one value: a string, several: a list;
//      binary values in base64) and "grpc-status-details-bin" is decoded into the
//      google.rpc.Status it carries, each detail as {"@type": ..., ...fields}
//      (BadRequest, ErrorInfo, RetryInfo, ... from .cache/protos/google/rpc).
//      For ask-stream, the events received before the error are printed first.
//
// Protos: protos/ (the project's) and .cache/protos/ (fetched by `make setup`). The health
// service is defined below by hand: it is four lines of the public gRPC health protocol,
// and no third-party .proto file is committed.

import path from "node:path";
import { fileURLToPath } from "node:url";
import { existsSync, readFileSync } from "node:fs";

import * as grpc from "@grpc/grpc-js";
import * as protoLoader from "@grpc/proto-loader";
import protobuf from "protobufjs";

const HERE = path.dirname(fileURLToPath(import.meta.url));
const ROOT = path.resolve(HERE, "..", "..");
const PROTO_DIR = path.join(ROOT, "protos");
const DEPS_DIR = path.join(ROOT, ".cache", "protos");

const LOADER_OPTIONS = {
  keepCase: true,
  longs: String,
  enums: String,
  bytes: String,
  defaults: true,
  oneofs: true,
};

// The same conversion for the decoded google.rpc details.
const TO_OBJECT = { longs: String, enums: String, bytes: String, defaults: true, oneofs: true };

const EXIT_USAGE = 2;
const EXIT_RPC_ERROR = 3;

// grpc.health.v1 (https://github.com/grpc/grpc/blob/master/doc/health-checking.md), written
// with protobufjs's JSON descriptor format: the Check method only.
const HEALTH_DESCRIPTOR = {
  nested: {
    grpc: {
      nested: {
        health: {
          nested: {
            v1: {
              nested: {
                HealthCheckRequest: { fields: { service: { type: "string", id: 1 } } },
                HealthCheckResponse: {
                  fields: { status: { type: "ServingStatus", id: 1 } },
                  nested: {
                    ServingStatus: {
                      values: { UNKNOWN: 0, SERVING: 1, NOT_SERVING: 2, SERVICE_UNKNOWN: 3 },
                    },
                  },
                },
                Health: {
                  methods: {
                    Check: { requestType: "HealthCheckRequest", responseType: "HealthCheckResponse" },
                  },
                },
              },
            },
          },
        },
      },
    },
  },
};

class UsageError extends Error {}

function parseArgs(argv) {
  const options = {
    address: "127.0.0.1:50051",
    deadline: 30,
    headers: [],
    tlsCa: null,
    tlsCert: null,
    tlsKey: null,
    apiKey: process.env.RAGAGENT_API_KEY || null,
  };
  const rest = [];
  for (let i = 0; i < argv.length; i += 1) {
    const arg = argv[i];
    const takeValue = (name) => {
      const eq = arg.indexOf("=");
      if (eq !== -1) return arg.slice(eq + 1);
      i += 1;
      if (i >= argv.length) throw new UsageError(`${name} needs a value`);
      return argv[i];
    };
    if (arg === "--address" || arg.startsWith("--address=")) {
      options.address = takeValue("--address");
    } else if (arg === "--deadline" || arg.startsWith("--deadline=")) {
      const value = Number(takeValue("--deadline"));
      if (!Number.isFinite(value) || value <= 0) {
        throw new UsageError("--deadline must be a positive number of seconds");
      }
      options.deadline = value;
    } else if (arg === "--header" || arg.startsWith("--header=")) {
      const pair = takeValue("--header");
      const eq = pair.indexOf("=");
      if (eq < 1) throw new UsageError("--header must be KEY=VALUE");
      options.headers.push([pair.slice(0, eq), pair.slice(eq + 1)]);
    } else if (arg === "--tls-ca" || arg.startsWith("--tls-ca=")) {
      options.tlsCa = takeValue("--tls-ca");
    } else if (arg === "--tls-cert" || arg.startsWith("--tls-cert=")) {
      options.tlsCert = takeValue("--tls-cert");
    } else if (arg === "--tls-key" || arg.startsWith("--tls-key=")) {
      options.tlsKey = takeValue("--tls-key");
    } else if (arg === "--api-key" || arg.startsWith("--api-key=")) {
      options.apiKey = takeValue("--api-key");
      if (!options.apiKey) throw new UsageError("--api-key must not be empty");
    } else if (arg === "-h" || arg === "--help") {
      options.help = true;
    } else if (arg.startsWith("--")) {
      throw new UsageError(`unknown option ${arg}`);
    } else {
      rest.push(arg);
    }
  }
  if (options.help) return options;
  if ((options.tlsCert === null) !== (options.tlsKey === null)) {
    throw new UsageError("--tls-cert and --tls-key go together");
  }
  if (rest.length < 1 || rest.length > 2) {
    throw new UsageError("expected COMMAND [JSON]");
  }
  [options.command] = rest;
  options.request = {};
  if (rest.length === 2) {
    try {
      options.request = JSON.parse(rest[1]);
    } catch (error) {
      throw new UsageError(`the request is not valid JSON: ${error.message}`);
    }
    if (options.request === null || typeof options.request !== "object" || Array.isArray(options.request)) {
      throw new UsageError("the request must be a JSON object");
    }
  }
  return options;
}

function requireDir(dir, hint) {
  if (!existsSync(dir)) throw new UsageError(`${dir} does not exist: ${hint}`);
}

function loadAgentService() {
  requireDir(PROTO_DIR, "run the client from a checkout of the project");
  requireDir(DEPS_DIR, "run `make setup` to fetch the third-party protos");
  const definition = protoLoader.loadSync(["ragagent/v1/agent.proto"], {
    ...LOADER_OPTIONS,
    includeDirs: [PROTO_DIR, DEPS_DIR],
  });
  return grpc.loadPackageDefinition(definition).ragagent.v1.AgentService;
}

function loadCorpusService() {
  requireDir(PROTO_DIR, "run the client from a checkout of the project");
  requireDir(DEPS_DIR, "run `make setup` to fetch the third-party protos");
  const definition = protoLoader.loadSync(["ragagent/v1/corpus.proto"], {
    ...LOADER_OPTIONS,
    includeDirs: [PROTO_DIR, DEPS_DIR],
  });
  return grpc.loadPackageDefinition(definition).ragagent.v1.CorpusService;
}

function loadHealthService() {
  const definition = protoLoader.fromJSON(HEALTH_DESCRIPTOR, LOADER_OPTIONS);
  return grpc.loadPackageDefinition(definition).grpc.health.v1.Health;
}

let rpcTypes = null;

// google.rpc.Status and the standard error details, from the fetched protos.
function loadRpcTypes() {
  if (rpcTypes === null) {
    const root = new protobuf.Root();
    root.resolvePath = (_origin, target) => {
      // Well-known types (google/protobuf/*.proto) are bundled with protobufjs.
      if (target.includes("google/protobuf/")) return target;
      return path.isAbsolute(target) ? target : path.join(DEPS_DIR, target);
    };
    root.loadSync(["google/rpc/status.proto", "google/rpc/error_details.proto"], { keepCase: true });
    root.resolveAll();
    rpcTypes = root;
  }
  return rpcTypes;
}

function decodeAny(any) {
  const typeUrl = any.type_url;
  const typeName = typeUrl.slice(typeUrl.lastIndexOf("/") + 1);
  let type;
  try {
    type = loadRpcTypes().lookupType(typeName);
  } catch {
    return { "@type": typeUrl, value: Buffer.from(any.value).toString("base64") };
  }
  return { "@type": typeUrl, ...type.toObject(type.decode(any.value), TO_OBJECT) };
}

function decodeStatus(buffer) {
  const Status = loadRpcTypes().lookupType("google.rpc.Status");
  const status = Status.decode(buffer);
  return {
    code: status.code,
    message: status.message,
    details: status.details.map(decodeAny),
  };
}

function metadataToJSON(metadata) {
  const out = {};
  if (!metadata) return out;
  for (const [key, values] of Object.entries(metadata.toJSON())) {
    let rendered;
    if (key === "grpc-status-details-bin") {
      try {
        rendered = values.map((value) => decodeStatus(value));
      } catch (error) {
        rendered = values.map((value) => ({
          undecodable: Buffer.from(value).toString("base64"),
          error: error.message,
        }));
      }
    } else {
      rendered = values.map((value) => (Buffer.isBuffer(value) ? value.toString("base64") : value));
    }
    out[key] = rendered.length === 1 ? rendered[0] : rendered;
  }
  return out;
}

function errorToJSON(error) {
  return {
    code: typeof error.code === "number" ? error.code : grpc.status.UNKNOWN,
    details: error.details ?? error.message ?? String(error),
    metadata: metadataToJSON(error.metadata),
  };
}

function print(value) {
  process.stdout.write(`${JSON.stringify(value)}\n`);
}

function callOptions(options) {
  return { deadline: new Date(Date.now() + options.deadline * 1000) };
}

function usesTls(options) {
  return options.tlsCa !== null || options.tlsCert !== null;
}

function requestMetadata(options) {
  const metadata = new grpc.Metadata();
  for (const [key, value] of options.headers) metadata.add(key, value);
  // Over TLS the key travels as call credentials (channelCredentials below); grpc-js
  // refuses to compose call credentials with insecure ones, so plaintext sends it here.
  if (options.apiKey !== null && !usesTls(options)) {
    metadata.set("authorization", `Bearer ${options.apiKey}`);
  }
  return metadata;
}

function readPem(file, flag) {
  try {
    return readFileSync(file);
  } catch (error) {
    throw new UsageError(`${flag} ${file}: ${error.message}`);
  }
}

// Plaintext, or TLS (a CA file, else the system's CAs; a client certificate for mutual
// TLS) with the API key, if any, as call credentials sent on every call.
function channelCredentials(options) {
  if (!usesTls(options)) return grpc.credentials.createInsecure();
  const ssl = grpc.credentials.createSsl(
    options.tlsCa === null ? null : readPem(options.tlsCa, "--tls-ca"),
    options.tlsKey === null ? null : readPem(options.tlsKey, "--tls-key"),
    options.tlsCert === null ? null : readPem(options.tlsCert, "--tls-cert"),
  );
  if (options.apiKey === null) return ssl;
  const bearer = grpc.credentials.createFromMetadataGenerator((_params, callback) => {
    const metadata = new grpc.Metadata();
    metadata.set("authorization", `Bearer ${options.apiKey}`);
    callback(null, metadata);
  });
  return grpc.credentials.combineChannelCredentials(ssl, bearer);
}

function unary(client, method, request, options) {
  return new Promise((resolve, reject) => {
    client[method](request, requestMetadata(options), callOptions(options), (error, response) => {
      if (error) reject(error);
      else resolve(response);
    });
  });
}

function serverStream(client, method, request, options, onMessage) {
  return new Promise((resolve, reject) => {
    const call = client[method](request, requestMetadata(options), callOptions(options));
    // Settle only once both the status and the end of the stream have arrived, so that
    // every message received before the status is printed before the outcome.
    let error = null;
    let status = null;
    let ended = false;
    const settle = () => {
      if (status === null || !ended) return;
      if (error !== null) reject(error);
      else if (status.code !== grpc.status.OK) reject({ ...status, details: status.details });
      else resolve();
    };
    call.on("data", onMessage);
    call.on("error", (err) => {
      error = err;
    });
    call.on("status", (received) => {
      status = received;
      settle();
    });
    call.on("end", () => {
      ended = true;
      settle();
    });
  });
}

const COMMANDS = {
  health: { service: loadHealthService, method: "Check", defaults: { service: "" } },
  retrieve: { service: loadAgentService, method: "Retrieve" },
  ask: { service: loadAgentService, method: "Ask" },
  "ask-stream": { service: loadAgentService, method: "AskStream", streaming: true },
  "list-documents": { service: loadCorpusService, method: "ListDocuments" },
  "corpus-stats": { service: loadCorpusService, method: "GetCorpusStats" },
};

async function run(options) {
  const command = Object.hasOwn(COMMANDS, options.command) ? COMMANDS[options.command] : null;
  if (command === null) throw new UsageError(`unknown command ${JSON.stringify(options.command)}`);
  const Service = command.service();
  const client = new Service(options.address, channelCredentials(options));
  const request = { ...command.defaults, ...options.request };
  try {
    if (command.streaming) {
      await serverStream(client, command.method, request, options, print);
    } else {
      print(await unary(client, command.method, request, options));
    }
  } finally {
    client.close();
  }
}

async function main() {
  let options;
  try {
    options = parseArgs(process.argv.slice(2));
    if (options.help) {
      process.stdout.write("usage: client.mjs [--address HOST:PORT] [--deadline S] [--header K=V]... "
        + "[--tls-ca FILE] [--tls-cert FILE --tls-key FILE] [--api-key KEY] "
        + "health|retrieve|ask|ask-stream|list-documents|corpus-stats [JSON]\n");
      return 0;
    }
    await run(options);
    return 0;
  } catch (error) {
    if (error instanceof UsageError) {
      process.stderr.write(`client.mjs: ${error.message}\n`);
      return EXIT_USAGE;
    }
    if (error && typeof error.code === "number") {
      print(errorToJSON(error));
      return EXIT_RPC_ERROR;
    }
    throw error;
  }
}

process.exitCode = await main();
