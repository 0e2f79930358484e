# deploy/deploy.mk: `make image` builds the container image as a tarball, offline: no Docker engine, no registry,
# nothing from the network but Go modules. Included from the top Makefile; also works alone:
#   make -f deploy/deploy.mk image [IMAGE_OUT=dir] [IMAGE_REF=repo:tag] [IMAGE_GOARCH=arm64]
# Load the result with `docker load -i out/nodelocaldns-image.tar` (or podman load, ctr images import).
# deploy/Dockerfile builds the same binary with the same flags for people who use Docker.

IMAGE_OUT     ?= out
IMAGE_TAR     ?= $(IMAGE_OUT)/nodelocaldns-image.tar
IMAGE_REF     ?= ghcr.io/nodelocaldns/nodelocaldns:dev
# Computed once (:=), not at every use.
ifndef IMAGE_GOARCH
IMAGE_GOARCH  := $(shell go env GOARCH)
endif
ifndef IMAGE_VERSION
IMAGE_VERSION := $(or $(VERSION),$(shell git describe --tags --always --dirty 2>/dev/null || echo dev))
endif
# The last commit's time stamps the image, so the same commit gives the same digest.
ifndef IMAGE_EPOCH
IMAGE_EPOCH   := $(shell git log -1 --format=%ct 2>/dev/null || echo 0)
endif
# Static (no libc in the image) and no build id, so one commit built in one directory gives one digest. No
# -trimpath: it would recompile every package apart from the tests' builds (the top Makefile wants one cache).
# `nodelocaldns -version` prints IMAGE_VERSION.
IMAGE_GOBUILD ?= CGO_ENABLED=0 GOOS=linux GOARCH=$(IMAGE_GOARCH) go build \
	-ldflags='-s -w -buildid= -X main.version=$(IMAGE_VERSION)'

.PHONY: image
image:
	mkdir -p $(IMAGE_OUT)
	$(IMAGE_GOBUILD) -o $(IMAGE_OUT)/nodelocaldns ./cmd/nodelocaldns
	go run ./cmd/mkimage -binary $(IMAGE_OUT)/nodelocaldns -arch $(IMAGE_GOARCH) -version $(IMAGE_VERSION) \
		-created $(IMAGE_EPOCH) -ref $(IMAGE_REF) -o $(IMAGE_TAR)

# helm for the chart's tests (deploy/chart_*_test.go) and test/cluster: built from deploy/helmtool/go.mod into
# .cache/helm, once per helm and Go version (deploy/build-helm.sh). `make test` builds it first, so CI's cold run
# builds it once and every later run finds it.
HELM_CACHE ?= $(CURDIR)/.cache/helm

.PHONY: helm
helm:
	@deploy/build-helm.sh $(HELM_CACHE) >/dev/null

test: helm
