#!/usr/bin/env bash
# A first import end to end: build a small qcow2.xz with known content, serve
# it on 127.0.0.1, import it onto a file (and a loop device when root), and
# check the result byte for byte.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin"
work=$(mktemp -d)
server=""
loop=""
cleanup() {
  [ -n "$server" ] && kill "$server" 2>/dev/null || true
  [ -n "$loop" ] && losetup -d "$loop" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

echo "== making a 64 MiB disk image with random, text and empty blocks"
head -c 8M /dev/urandom > "$work/disk.raw"
truncate -s 32M "$work/disk.raw"
{ yes "hello from the importer demo" || true; } | head -c 4M >> "$work/disk.raw"
truncate -s 64M "$work/disk.raw"
qemu-img convert -f raw -O qcow2 "$work/disk.raw" "$work/disk.qcow2"
xz -T0 -k "$work/disk.qcow2"
mkdir "$work/www" && mv "$work/disk.qcow2.xz" "$work/www/"

go build -o "$work/demoserve" ./scripts/demoserve
"$work/demoserve" "$work/www" > "$work/url" &
server=$!
for _ in $(seq 50); do [ -s "$work/url" ] && break; sleep 0.1; done
url="$(cat "$work/url")disk.qcow2.xz"
sum=$(sha256sum "$work/www/disk.qcow2.xz" | cut -d' ' -f1)

echo "== importing $url onto a file"
./bin/importer --json --size 128Mi --checksum "sha256:$sum" "$url" "$work/disk.img"
cmp -n $((64<<20)) "$work/disk.raw" "$work/disk.img" && echo "content matches (the file was grown to $(stat -c %s "$work/disk.img") bytes)"

if [ "$(id -u)" = 0 ] && command -v losetup >/dev/null; then
  echo "== importing $url onto a loop device"
  truncate -s 100M "$work/loop.img"
  loop=$(losetup -f --show "$work/loop.img")
  ./bin/importer --json "$url" "$loop"
  cmp -n $((64<<20)) "$work/disk.raw" "$loop" && echo "content on $loop matches"
fi
echo "== demo done"
