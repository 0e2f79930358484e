# deploy/deploy.mk: `make image` builds the container image as one archive, offline: no Docker engine, no registry,
# nothing from the network but Go modules. Included from the top Makefile; also works alone:
#   make -f deploy/deploy.mk image [IMAGE_OUT=dir] [IMAGE_REF=registry/repo:tag] [IMAGE_ARCHS="amd64 arm64"]
# The archive holds an OCI image index with one image per IMAGE_ARCHS platform (all linux), so that one reference
# serves the amd64 and the arm64 nodes of a cluster. It is an OCI image layout in a tar with a `docker save`
# manifest.json beside it: `ctr images import` reads every platform (test/cluster imports it so), `docker load -i`
# on the classic store the IMAGE_GOARCH image alone; `skopeo copy --all oci-archive:out/nodelocaldns-image.tar
# docker://REGISTRY/REPO:TAG`, or `crane push` of the unpacked directory, pushes every platform (README "Build
# and push the image").
# deploy/Dockerfile builds the same binary with the same flags for people who use Docker.

IMAGE_OUT     ?= out
IMAGE_TAR     ?= $(IMAGE_OUT)/nodelocaldns-image.tar
IMAGE_REF     ?= ghcr.io/nodelocaldns/nodelocaldns:dev
# The platforms of the index, as GOARCH values; each binary is $(IMAGE_OUT)/linux-<arch>/nodelocaldns.
IMAGE_ARCHS   ?= amd64 arm64
# This machine's architecture, one of IMAGE_ARCHS: its binary is copied to $(IMAGE_OUT)/nodelocaldns (test/cluster
# runs it on the host) and its image is the one the archive's manifest.json gives `docker load`. Computed once
# (:=), not at every use.
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
# -trimpath: it would recompile every package apart from the tests' builds (the top Makefile wants one cache,
# and test-arm64 shares the arm64 packages with this build). `nodelocaldns -version` prints IMAGE_VERSION.
# $$arch is the recipe's loop variable.
IMAGE_GOBUILD ?= CGO_ENABLED=0 GOOS=linux GOARCH=$$arch go build \
	-ldflags='-s -w -buildid= -X main.version=$(IMAGE_VERSION)'

.PHONY: image
image:
	$(if $(filter $(IMAGE_GOARCH),$(IMAGE_ARCHS)),,$(error IMAGE_GOARCH=$(IMAGE_GOARCH) is not one of IMAGE_ARCHS=$(IMAGE_ARCHS)))
	for arch in $(IMAGE_ARCHS); do \
		mkdir -p $(IMAGE_OUT)/linux-$$arch && scripts/timed.sh "image: building linux/$$arch" env $(IMAGE_GOBUILD) -o $(IMAGE_OUT)/linux-$$arch/nodelocaldns ./cmd/nodelocaldns || exit 1; \
	done
	cp $(IMAGE_OUT)/linux-$(IMAGE_GOARCH)/nodelocaldns $(IMAGE_OUT)/nodelocaldns
	go run ./cmd/mkimage $(foreach a,$(IMAGE_ARCHS),-binary $(a)=$(IMAGE_OUT)/linux-$(a)/nodelocaldns) -load-arch $(IMAGE_GOARCH) \
		-version $(IMAGE_VERSION) -created $(IMAGE_EPOCH) -ref $(IMAGE_REF) -o $(IMAGE_TAR)

# helm for the chart's tests (deploy/chart_*_test.go) and test/cluster: built from deploy/helmtool/go.mod into
# .cache/helm, once per helm and Go version (deploy/build-helm.sh). `make test` builds it first, so CI's cold run
# builds it once and every later run finds it.
HELM_CACHE ?= $(CURDIR)/.cache/helm

.PHONY: helm
helm:
	@echo "helm: $$(deploy/build-helm.sh $(HELM_CACHE))"

test: helm
