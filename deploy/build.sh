#!/bin/sh
# Builds the static binary the container image and the systemd unit use,
# and gathers the image's files into deploy/image/. No base image is
# fetched: the image is FROM scratch.
#
#   deploy/build.sh [VERSION]          # then: podman build -f deploy/Containerfile deploy/image
set -eu
cd "$(dirname "$0")/.."
version=${1:-$(git describe --tags --always --dirty 2>/dev/null || echo devel)}
out=deploy/image
mkdir -p "$out/etc/ssl/certs" "$out/data"
CGO_ENABLED=0 go build -trimpath \
	-ldflags "-s -w -X github.com/bloomgate/bloomgate/internal/version.release=$version" \
	-o "$out/bloomgate" ./cmd/bloomgate
# TLS to PostgreSQL, NATS and Redis verifies against the build host's CA bundle.
for ca in /etc/ssl/certs/ca-certificates.crt /etc/pki/tls/certs/ca-bundle.crt; do
	if [ -f "$ca" ]; then cp "$ca" "$out/etc/ssl/certs/ca-certificates.crt"; break; fi
done
cp deploy/bloomgate.conf.example "$out/bloomgate.conf"
echo "built $out/bloomgate ($version)"
