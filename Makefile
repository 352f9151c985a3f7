# csi-rclone. The tests and the demo mount for real: run them as root on a
# machine with /dev/fuse (the benchmarks' plain rclone mounts also need
# fusermount3, Debian package fuse3).

GO      ?= go
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
BIN     := bin/csi-rclone
LDFLAGS := -X main.version=$(VERSION)

.PHONY: all build demo test lint unit fuzz proto clean fuse-conf

all: build

build:
	CGO_ENABLED=0 $(GO) build -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/csi-rclone

# The driver's main job end to end: S3 on loopback, the node plugin, a
# kubelet stand-in that stages, publishes to two pods, writes, cleans up.
demo: build fuse-conf
	$(GO) run ./test/demo -binary $(BIN)

# Everything CI runs: static checks, then unit, integration, csi-sanity and
# end-to-end tests against real mounts.
test: lint fuse-conf
	$(GO) test -count=1 -timeout 30m ./...

# The driver opens /dev/fuse and mounts as root, and hands the device to
# its unprivileged workers: neither a 0666 /dev/fuse nor user_allow_other in
# /etc/fuse.conf is needed. This only checks that the device is there.
fuse-conf:
	@[ -c /dev/fuse ] || { echo "no /dev/fuse: modprobe fuse"; exit 1; }

lint:
	@out=$$(gofmt -l cmd pkg secrets test); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

# Tests that need neither root nor FUSE.
unit:
	$(GO) test -count=1 ./secrets/...

fuzz:
	$(GO) test ./secrets/ -run '^$$' -fuzz FuzzParse -fuzztime 2m

# Regenerate the secret-service API's Go code. protoc comes from Debian
# (protobuf-compiler); the Go plugins are pinned and built into bin/tools.
PROTOC_GEN_GO      := google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
PROTOC_GEN_GO_GRPC := google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.6.2
proto:
	@command -v protoc >/dev/null || apt-get install -y -qq protobuf-compiler
	GOBIN=$(CURDIR)/bin/tools $(GO) install $(PROTOC_GEN_GO)
	GOBIN=$(CURDIR)/bin/tools $(GO) install $(PROTOC_GEN_GO_GRPC)
	PATH=$(CURDIR)/bin/tools:$$PATH protoc -I proto \
		--go_out=proto --go_opt=paths=source_relative \
		--go-grpc_out=proto --go-grpc_opt=paths=source_relative \
		proto/secretservice/v1/secretservice.proto

clean:
	rm -rf bin

# Render the Helm chart with its default values into deploy/kubernetes, the
# plain manifests; go test ./deploy/... fails when they are out of date.
.PHONY: manifests
manifests:
	$(GO) run ./deploy/render -chart deploy/helm/csi-rclone -out deploy/kubernetes

# Benchmarks against S3 on loopback, each figure next to a baseline measured
# in the same run; ends with one markdown table (docs/benchmarks.md).
# PROFILE=wan20 or wan80 puts the S3 server 20 or 80 ms of round trip away
# (Toxiproxy in process, 1 Gbit/s per connection). BENCHFLAGS=-quick for a
# short run; go run ./test/bench/report -h for more (-rounds, -plot, ...).
PROFILE ?= loopback
.PHONY: bench
bench: fuse-conf
	GO=$(GO) $(GO) run ./test/bench/report -profile=$(PROFILE) $(BENCHFLAGS)

# The driver, its image and its chart on a real single-node Kubernetes built
# on this machine (test/cluster): etcd, containerd, runc and CNI from Debian;
# kube-apiserver, controller-manager, scheduler, kubelet and csi-provisioner
# built once from the wrapper modules in test/cluster/{k8s,provisioner} into
# ~/.cache/csi-rclone-cluster (~10 min of both cores on a fresh machine).
# Everything runs in a network namespace of its own under
# /tmp/csi-rclone-cluster and is undone on the way out.
CLUSTER_DEBS := etcd-server containerd runc containernetworking-plugins busybox-static iproute2 util-linux
# MOUNTER=pod runs the scenario with the mount workers in mount pods.
MOUNTER ?= process
.PHONY: e2e-cluster cluster-down
e2e-cluster: fuse-conf
	@missing=$$(for p in $(CLUSTER_DEBS); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then \
		echo "installing $$missing"; apt-get update -qq; \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; fi
	@# The test tears the cluster down itself; this also covers a test binary
	@# that dies without its cleanups (timeout, kill, Ctrl-C).
	@trap 'true' INT TERM; \
	CSI_RCLONE_E2E_CLUSTER=1 CSI_RCLONE_E2E_MOUNTER=$(MOUNTER) $(GO) test -count=1 -timeout 60m -v -run '^TestCluster$$' ./test/cluster/e2e/; rc=$$?; \
	$(GO) run ./test/cluster/cmd/cluster down || rc=1; exit $$rc

# Tear down what an interrupted e2e-cluster left (processes, mounts, cgroups,
# sysctls, the netns).
cluster-down:
	$(GO) run ./test/cluster/cmd/cluster down
