# syntax=docker/dockerfile:1
# Multi-stage: a static binary on distroless, running as nonroot.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY cmd ./cmd
COPY opa ./opa
COPY server ./server
ARG VERSION=dev
RUN CGO_ENABLED=0 GOOS=linux go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" \
    -o /out/opa-scheduler-extender ./cmd/opa-scheduler-extender

# The plugin build: kube-scheduler with the OPAGatekeeper plugin, a module
# of its own (docker build --target opa-kube-scheduler -t opa-kube-scheduler .).
FROM golang:1.26 AS build-plugin
WORKDIR /src
COPY go.mod go.sum ./
COPY cmd/opa-kube-scheduler/go.mod cmd/opa-kube-scheduler/go.sum ./cmd/opa-kube-scheduler/
RUN cd cmd/opa-kube-scheduler && go mod download
COPY cmd ./cmd
COPY opa ./opa
COPY server ./server
RUN cd cmd/opa-kube-scheduler && CGO_ENABLED=0 GOOS=linux go build -trimpath -ldflags "-s -w" \
    -o /out/opa-kube-scheduler .

FROM gcr.io/distroless/static-debian12:nonroot AS opa-kube-scheduler
COPY --from=build-plugin /out/opa-kube-scheduler /opa-kube-scheduler
USER 65532:65532
ENTRYPOINT ["/opa-kube-scheduler"]

# The extender, the default target.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/opa-scheduler-extender /opa-scheduler-extender
# The example policies, for `--policy-dir /policies` without a cluster.
COPY deploy/examples /policies
USER 65532:65532
EXPOSE 8443
ENTRYPOINT ["/opa-scheduler-extender"]
CMD ["serve", "--listen=:8443"]
