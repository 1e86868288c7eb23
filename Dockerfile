# termserver's container image (README, "Chat with your own server"):
#
#   docker build --build-arg VERSION=$(git describe --always --dirty) -t termserver .
#   docker run --rm -p 8080:8080 -v termlink-data:/var/lib/termlink termserver
#
# Checked without docker by cmd/termserver/dockerfile_test.go: pinned base
# images, the Makefile's version stamp and binary path, static (no cgo),
# a non-root user, the workspace volume and the port. The base images are
# pinned by version; pin them by digest too (@sha256:...) where you publish.

# Build: a static termserver, stamped as make build stamps it
# (-X main.version, which termserver --version prints), built to the
# Makefile's path (bin/termserver).
FROM golang:1.26.0-alpine3.23 AS build
ARG VERSION=devel
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 GOOS=linux go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o bin/termserver ./cmd/termserver \
 && mkdir -p /out/var/lib/termlink \
 && cp bin/termserver /out/termserver

# Run: Alpine for /bin/sh (termserver starts its agents' sentinel and
# shell-syntax agent commands with it), an unprivileged user, the
# workspace a volume it owns, the example config for containers.
FROM alpine:3.23
RUN addgroup -S -g 10001 termlink && adduser -S -D -H -u 10001 -G termlink -h /var/lib/termlink termlink
COPY --from=build /out/termserver /usr/local/bin/termserver
COPY --from=build --chown=10001:10001 /out/var/lib/termlink /var/lib/termlink
COPY cmd/termserver/examples/container.json /etc/termlink/termserver.json
USER 10001:10001
WORKDIR /var/lib/termlink
VOLUME ["/var/lib/termlink"]
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/termserver"]
CMD ["--config", "/etc/termlink/termserver.json"]
