#!/usr/bin/env bash
# Generates the client code of every language from protos/ with the documented templates
# (clients/*/buf.gen.yaml) and compiles it with the example client of that language, with
# toolchains that all come from package registries (docs/clients.md). `make clients` runs it.
#
#   scripts/build-clients.sh [--out DIR] [go|java|typescript]...   (default: all three)
#
# Output under DIR (default .cache/clients):
#   go/bin/ragagent-ask                 clients/go/cmd/ragagent-ask, built in GOPATH mode
#   java/classes, java/classpath        generated code + clients/java/src, compiled by javac;
#   java/native, java/jvm-options       netty-tcnative for TLS; run:
#     java $(cat java/jvm-options) -cp "$(cat java/classpath)" dev.ragagent.example.AskStream
#   typescript: tests/interop/ts/dist/client.js (connect-es), compiled by tsc
# Each language checks that its generated code holds ragagent/v1 only (no buf/validate or
# google/rpc copies). A language whose toolchain is missing is reported and, when it was asked
# for by name, ends the script with exit code 4; with no names it is skipped.
#
# Needs .cache/protos (scripts/fetch-protos.sh or make setup) and buf: for TypeScript the one
# npm installs from tests/interop/ts/package-lock.json; for Go and Java $BUF, else
# .venv/bin/buf (make setup), else buf on PATH, else that npm one. Toolchains, all from Debian
# bookworm packages except TypeScript's:
#   go:         golang-go protoc-gen-go protoc-gen-go-grpc golang-google-protobuf-dev
#               golang-google-grpc-dev golang-google-genproto-dev
#               golang-github-golang-protobuf-1-5-dev   (sources in GOCODE=/usr/share/gocode)
#   java:       default-jdk-headless protobuf-compiler libprotobuf-java libgrpc-java
#               protobuf-compiler-grpc-java-plugin libnetty-java libperfmark-java
#               libgoogle-gson-java libgeronimo-annotation-1.3-spec-java
#               libnetty-tcnative-java libnetty-tcnative-jni   (TLS: ALPN from OpenSSL,
#               which netty 4.1.48 does not find in JDK 17)
#               (jars in JAVA_LIBS=/usr/share/java)
#   typescript: node >= 20 and npm (packages from tests/interop/ts/package-lock.json)
# The google/rpc types the Go and Java examples decode come from genproto (Go) and from
# .cache/protos generated into the build (Java: Debian's proto-google-common-protos 1.16 has
# no ErrorInfo); buf/validate is generated into the build too. None of that is committed.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
OUT=".cache/clients"
LANGS=()
while [ $# -gt 0 ]; do
  case "$1" in
    --out)
      OUT="$2"
      shift 2
      ;;
    go | java | typescript)
      LANGS+=("$1")
      shift
      ;;
    *)
      echo "usage: scripts/build-clients.sh [--out DIR] [go|java|typescript]..." >&2
      exit 2
      ;;
  esac
done
EXPLICIT=${#LANGS[@]}
if [ "$EXPLICIT" -eq 0 ]; then LANGS=(go java typescript); fi
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"

TS_DIR="$ROOT/tests/interop/ts"
# buf: $BUF, else .venv/bin/buf (make setup), else buf on PATH, else the one npm installed for
# the TypeScript client. The TypeScript build uses that npm one unless BUF is set.
find_buf() {
  local candidate
  for candidate in "${BUF:-}" "$ROOT/.venv/bin/buf" "$(command -v buf || true)" \
    "$TS_DIR/node_modules/.bin/buf"; do
    if [ -n "$candidate" ] && [ -x "$candidate" ]; then
      echo "$candidate"
      return
    fi
  done
}
[ -f .cache/protos/buf/validate/validate.proto ] || {
  echo "build-clients: .cache/protos missing: run scripts/fetch-protos.sh (or make setup)" >&2
  exit 1
}
GOCODE="${GOCODE:-/usr/share/gocode}"
JAVA_LIBS="${JAVA_LIBS:-/usr/share/java}"
EXIT_TOOLCHAIN=4
MISSING=0

say() { echo "build-clients: $*"; }

# Prints what LANG lacks (empty when its toolchain is complete).
missing_for() {
  local lack=() tool jar
  if [ "$1" != typescript ] && [ -z "$(find_buf)" ]; then lack+=("buf"); fi
  case "$1" in
    go)
      for tool in go protoc-gen-go protoc-gen-go-grpc; do
        command -v "$tool" >/dev/null || lack+=("$tool")
      done
      for tool in google.golang.org/grpc google.golang.org/protobuf \
        google.golang.org/genproto/googleapis/rpc/errdetails; do
        [ -d "$GOCODE/src/$tool" ] || lack+=("$GOCODE/src/$tool")
      done
      ;;
    java)
      for tool in javac java protoc; do command -v "$tool" >/dev/null || lack+=("$tool"); done
      command -v protoc-gen-grpc-java >/dev/null || command -v grpc_java_plugin >/dev/null ||
        lack+=("protoc-gen-grpc-java")
      for jar in "${JAVA_JARS[@]}"; do [ -f "$JAVA_LIBS/$jar.jar" ] || lack+=("$jar.jar"); done
      [ -n "$(tcnative_so)" ] || lack+=("libnetty-tcnative.so (libnetty-tcnative-jni)")
      ;;
    typescript)
      for tool in node npm; do command -v "$tool" >/dev/null || lack+=("$tool"); done
      ;;
  esac
  echo "${lack[*]:-}"
}

JAVA_JARS=(protobuf protobuf-util gson guava grpc-api grpc-context grpc-core grpc-netty
  grpc-protobuf grpc-protobuf-lite grpc-stub perfmark-api geronimo-annotation-1.3-spec
  netty-buffer netty-codec netty-codec-http netty-codec-http2 netty-common netty-handler
  netty-resolver netty-transport netty-tcnative)

# Debian's netty-tcnative JNI library (OpenSSL, hence ALPN for TLS on JDK 17).
tcnative_so() {
  find /usr/lib/*/jni -maxdepth 1 -name libnetty-tcnative.so 2>/dev/null | head -n1
}

# Fails unless DIR holds generated files for ragagent/v1 (or dev/ragagent/v1) only.
only_ragagent() {
  local dir="$1" extra
  extra="$(find "$dir" -type f | sed "s#^$dir/##" | grep -v -E '^(ragagent/v1|dev/ragagent/v1)/' || true)"
  if [ -n "$extra" ]; then
    echo "build-clients: third-party code generated into $dir:" >&2
    echo "$extra" >&2
    exit 1
  fi
}

# buf generate from the repository root with a template written on the fly (third-party
# code the build needs but the documented templates leave out).
generate_deps() {
  local template="$1" out="$2" buf
  buf="$(find_buf)"
  local file
  file="$(mktemp "$OUT/deps.XXXXXX.yaml")"
  printf '%s\n' "$template" >"$file"
  "$buf" generate --template "$file" -o "$out"
  rm -f "$file"
}

build_go() {
  local dir="$OUT/go" gopath="$OUT/go/gopath" buf
  buf="$(find_buf)"
  rm -rf "$dir" && mkdir -p "$dir/bin" "$gopath/src/github.com/ragagent/ragagent/clients"
  "$buf" generate --template clients/go/buf.gen.yaml -o "$dir"
  only_ragagent "$dir/gen/go"
  # buf/validate at the import path its go_package names.
  generate_deps "version: v2
plugins:
  - local: protoc-gen-go
    out: gopath/src
    opt: paths=import
inputs:
  - directory: .cache/protos
    paths: [.cache/protos/buf/validate]" "$dir"
  mkdir -p "$gopath/src/github.com/ragagent/ragagent/gen/go"
  cp -r "$dir/gen/go/ragagent" "$gopath/src/github.com/ragagent/ragagent/gen/go/"
  cp -r clients/go "$gopath/src/github.com/ragagent/ragagent/clients/"
  GO111MODULE=off GOFLAGS='' GOPATH="$gopath:$GOCODE" \
    go build -o "$dir/bin/ragagent-ask" github.com/ragagent/ragagent/clients/go/cmd/ragagent-ask
  say "go: $dir/bin/ragagent-ask ($(go version | cut -d' ' -f3), GOPATH mode on $GOCODE)"
}

build_java() {
  local dir="$OUT/java" plugins buf
  buf="$(find_buf)"
  rm -rf "$dir" && mkdir -p "$dir/classes" "$dir/bin"
  plugins="$dir/bin"
  if ! command -v protoc-gen-grpc-java >/dev/null; then
    ln -s "$(command -v grpc_java_plugin)" "$plugins/protoc-gen-grpc-java"
  fi
  PATH="$plugins:$PATH" "$buf" generate --template clients/java/buf.gen.yaml -o "$dir"
  only_ragagent "$dir/gen/java"
  generate_deps "version: v2
plugins:
  - protoc_builtin: java
    out: deps
inputs:
  - directory: .cache/protos
    paths:
      - .cache/protos/buf/validate
      - .cache/protos/google/rpc/status.proto
      - .cache/protos/google/rpc/error_details.proto" "$dir"
  local classpath="" jar
  for jar in "${JAVA_JARS[@]}"; do classpath="$classpath${classpath:+:}$JAVA_LIBS/$jar.jar"; done
  find "$dir/gen" "$dir/deps" clients/java/src -name '*.java' >"$dir/sources.txt"
  javac -nowarn -encoding UTF-8 -d "$dir/classes" -cp "$classpath" "@$dir/sources.txt" 2>&1 |
    { grep -v '^Note: ' || true; }
  [ -f "$dir/classes/dev/ragagent/example/AskStream.class" ] || exit 1
  printf '%s' "$dir/classes:$classpath" >"$dir/classpath"
  # netty 4.1.48 loads the library as libnetty_tcnative.so, Debian names it
  # libnetty-tcnative.so, and tcnative refuses to load through a symlink (it checks its own
  # file name): a copy under the expected name, on java.library.path.
  mkdir -p "$dir/native"
  cp "$(tcnative_so)" "$dir/native/libnetty_tcnative.so"
  printf '%s' "-Djava.library.path=$dir/native" >"$dir/jvm-options"
  say "java: $dir/classes ($(javac -version 2>&1), protoc $(protoc --version | cut -d' ' -f2))"
}

build_typescript() {
  local lock_sha stamp="$TS_DIR/node_modules/.ragagent-lock.sha256"
  # One build of this folder at a time: two test processes building it at once (seen under
  # pytest-xdist in CI) removed and checked each other's generated files.
  exec 9>"$TS_DIR/.build.lock"
  flock 9
  lock_sha="$(sha256sum "$TS_DIR/package-lock.json" | cut -d' ' -f1)"
  if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$lock_sha" ]; then
    npm ci --prefix "$TS_DIR" --no-audit --no-fund --ignore-scripts
    printf '%s' "$lock_sha" >"$stamp"
  fi
  rm -rf "$TS_DIR/gen" "$TS_DIR/dist"
  # Everything from npm: buf (@bufbuild/buf), protoc-gen-es and tsc.
  local bin="$TS_DIR/node_modules/.bin"
  local buf="${BUF:-$bin/buf}"
  PATH="$bin:$PATH" "$buf" generate --template clients/typescript/buf.gen.yaml -o "$TS_DIR"
  only_ragagent "$TS_DIR/gen/ts"
  # On purpose: the google.rpc error details, for typed rich errors.
  PATH="$bin:$PATH" "$buf" generate .cache/protos --path .cache/protos/google/rpc/error_details.proto \
    --template clients/typescript/buf.gen.yaml -o "$TS_DIR"
  "$bin/tsc" -p "$TS_DIR/tsconfig.json"
  say "typescript: $TS_DIR/dist/client.js (node $(node --version), tsc $("$bin/tsc" --version |
    cut -d' ' -f2), buf $("$buf" --version))"
}

for lang in "${LANGS[@]}"; do
  missing="$(missing_for "$lang")"
  if [ -n "$missing" ]; then
    say "$lang: skipped, missing: $missing"
    MISSING=1
    continue
  fi
  "build_$lang"
done
if [ "$MISSING" -eq 1 ] && [ "$EXPLICIT" -gt 0 ]; then exit "$EXIT_TOOLCHAIN"; fi
