# syntax=docker/dockerfile:1

# Build a static binary: the runtime image has no libc to link against.
FROM golang:1.26 AS build
WORKDIR /src
# Dependencies first, so editing the code does not download them again.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/jobapi ./cmd/jobapi

# Alpine rather than distroless: its busybox wget lets compose probe /-/readiness.
FROM alpine:3.22
RUN apk add --no-cache ca-certificates \
    && adduser -D -H -u 10001 jobapi
COPY --from=build /out/jobapi /jobapi
USER jobapi
EXPOSE 8080
ENTRYPOINT ["/jobapi"]
CMD ["serve"]
