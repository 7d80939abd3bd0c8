# Builds every fairdispatch binary into one small image.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -o /out/ ./cmd/dispatcher ./cmd/mockworker ./cmd/loadgen ./cmd/engineworker ./cmd/fakeengine ./cmd/gateway

FROM gcr.io/distroless/static-debian12
COPY --from=build /out/ /usr/local/bin/
COPY configs/ /etc/fairdispatch/
ENTRYPOINT ["/usr/local/bin/dispatcher"]
