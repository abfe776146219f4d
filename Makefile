# fleet-agent: the two commands a newcomer needs are `make demo` and `make test`.
GO        ?= go
BIN       ?= bin/fleet-agent
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT    ?= $(shell git rev-parse HEAD 2>/dev/null || echo none)
DATE      ?= $(shell date -u +%Y-%m-%dT%H:%M:%SZ)
LDFLAGS   := -s -w -X main.version=$(VERSION) -X main.commit=$(COMMIT) -X main.date=$(DATE)
PREFIX    ?= /usr/local
DESTDIR   ?=
# The timeout guards a hung package, not speed. The slowest is
# internal/release: it gzips the 80 MB binary into debs and image layers
# about ten times, and the race detector instruments compress/flate. It took
# 9 min alone on two idle cores, 12 min in CI's whole suite, 14 min alone
# beside stress-ng --cpu 2, and past 25 min in the whole suite beside
# stress-ng (twice): 45 min holds that with room, well inside CI's 90.
TESTFLAGS ?= -count=1 -timeout 45m

STATICCHECK ?= $(shell go env GOPATH)/bin/staticcheck

.PHONY: build test gate lint vet fmt-check tidy-check boundary bench golden docs fuzz demo install clean

build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/fleet-agent

# The tests run with the race detector: the suite takes about 20 minutes on
# two cores, and the agent is concurrent (loop, outbox, socket, ops).
test: kube chromium awscli googleapis skopeo umoci lintian
	$(GO) test -race $(TESTFLAGS) ./...
	$(MAKE) test-etcd

# test-etcd: the suites of the store and of everything that writes it run
# again on the etcd backend (a real etcd server from the control plane
# cache, started by internal/state/statetest).
.PHONY: test-etcd
test-etcd: kube
	FLEET_AGENT_TEST_STATE=etcd $(GO) test -race $(TESTFLAGS) ./internal/state/... ./internal/apply/ ./internal/outbox/ \
	  ./internal/livecheck/ ./internal/substrate/join/ ./internal/agent/
	# The substrate suite with its random crash campaign on etcd; the
	# exhaustive and two-installation campaigns run on files above.
	FLEET_AGENT_TEST_STATE=etcd $(GO) test -race $(TESTFLAGS) -skip 'TestCrashAtEveryPoint|TestTwoInstallationsCrashCampaign' ./internal/substrate/
	# The policy in force survives a restart and a state copy on etcd too: a
	# second agent opening the same etcd store is what a failover is.
	FLEET_AGENT_TEST_STATE=etcd $(GO) test -race $(TESTFLAGS) -run 'TestPolicyInForceSurvivesARestart' ./cmd/fleet-agent/

# kube: the Kubernetes control plane the tests start (internal/testutil/kubeplane),
# built once per machine into ~/.cache/fleet-agent/kube (FLEET_AGENT_KUBE_CACHE
# overrides): about 30 minutes cold on two cores, seconds when already built.
# chromium: the page's browser test drives Debian's headless Chromium; a
# fresh machine gets it here (as root, through apt), so make test alone works.
.PHONY: chromium
chromium:
	@test -x /usr/bin/chromium || { \
	  if [ "$$(id -u)" = 0 ]; then DEBIAN_FRONTEND=noninteractive apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; \
	  else echo "the page's browser test needs Chromium: sudo apt-get install chromium"; exit 1; fi; }

.PHONY: awscli
# awscli: the EKS emulator's client suite runs the AWS CLI as shipped
# (Debian's v2 beside the image's v1); a fresh machine gets it here.
awscli:
	@test -x /usr/bin/aws || { \
	  if [ "$$(id -u)" = 0 ]; then DEBIAN_FRONTEND=noninteractive apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends awscli; \
	  else echo "the EKS emulator's client suite needs the AWS CLI: sudo apt-get install awscli"; exit 1; fi; }

# skopeo, umoci, lintian: the release suite (internal/release) pulls the
# node daemon's image back with Debian's skopeo, unpacks it with Debian's
# umoci and checks the Debian package with Debian's lintian; a fresh machine
# gets them here.
.PHONY: skopeo umoci lintian
skopeo umoci lintian:
	@command -v $@ >/dev/null || { \
	  if [ "$$(id -u)" = 0 ]; then DEBIAN_FRONTEND=noninteractive apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $@; \
	  else echo "the release suite needs $@: sudo apt-get install $@"; exit 1; fi; }

.PHONY: googleapis
# googleapis: the GKE emulator's Node client suite runs Google's googleapis
# package and its auth library as shipped, from npm, into a cache outside the
# clone; Node itself comes from Debian when missing. (gcloud, the other GKE
# client, is on the machine image: google-cloud-cli.)
NPM_CACHE ?= $(HOME)/.cache/fleet-agent/npm
googleapis:
	@command -v npm >/dev/null || { \
	  if [ "$$(id -u)" = 0 ]; then DEBIAN_FRONTEND=noninteractive apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends nodejs npm; \
	  else echo "the GKE emulator's Node client suite needs Node and npm: sudo apt-get install nodejs npm"; exit 1; fi; }
	@test -d $(NPM_CACHE)/node_modules/googleapis || npm install --prefix $(NPM_CACHE) --no-audit --no-fund googleapis@188.0.0

.PHONY: kube
kube:
	./scripts/kube-cache.sh

vet:
	$(GO) vet ./...

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null; git ls-files --others --exclude-standard '*.go' 2>/dev/null)); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

# go mod tidy -diff changes nothing and writes nothing outside the clone.
tidy-check:
	@$(GO) mod tidy -diff || { echo "go.mod/go.sum are not tidy: run 'go mod tidy'"; exit 1; }

boundary:
	$(GO) test -count=1 -run TestBoundary ./internal/boundary/

# staticcheck v0.8.2 builds on Go 1.26 (about 40 s the first time).
lint:
	@test -x $(STATICCHECK) || $(GO) install honnef.co/go/tools/cmd/staticcheck@v0.8.2
	$(STATICCHECK) ./...

# gate: what must be green before anything is committed to main.
gate: build vet fmt-check tidy-check lint test boundary

bench:
	$(GO) test -run '^$$' -bench . -benchtime 3x ./... | tee bench/latest.txt
	@echo "idle memory and CPU over 10 minutes: bench/idle.sh"

# golden rewrites the golden files (testdata/) of every package that keeps
# some: review the diff before committing it.
golden:
	$(GO) test -count=1 $$(grep -rl --include='*_test.go' 'testutil/golden"' . | xargs -n1 dirname | sort -u) -update

# docs rewrites the generated sections of docs/ (the document's fields from
# the schema, the fake provider's catalogue, the metrics) from the code;
# the text around them is kept. The docgen tests fail while a page is stale.
docs:
	$(GO) run ./cmd/fleet-docs

fuzz:
	$(GO) test -run '^$$' -fuzz FuzzValidate -fuzztime $${FUZZTIME:-60s} ./internal/fleet/

# make demo KEEP=1 leaves the demo's agent running (its page open at the
# printed URL) until Ctrl-C; without KEEP the demo exits by itself.
KEEP ?=
demo: build
	KEEP=$(KEEP) ./scripts/demo.sh $(BIN)

# Release: everything below is built from the commit alone (its time,
# never the clock), so the same commit gives the same bytes. The tools live
# in cmd/fleet-release, outside the fleet-agent binary.
EPOCH        ?= $(shell git log -1 --format=%ct 2>/dev/null || echo 0)
RELEASE_DATE := $(shell date -u -d @$(EPOCH) +%Y-%m-%dT%H:%M:%SZ)
RELEASE_LDFLAGS := -s -w -X main.version=$(VERSION) -X main.commit=$(COMMIT) -X main.date=$(RELEASE_DATE)
SOURCE_URL   ?= https://github.com/fleet-agent/fleet-agent
ARCHES       := amd64 arm64
DIST         ?= dist
PUSH         ?=
CYCLONEDX    ?= github.com/CycloneDX/cyclonedx-gomod/cmd/cyclonedx-gomod@v1.10.0
RELEASE_TOOL := bin/fleet-release

.PHONY: release-bins image deb release
release-bins:
	@for a in $(ARCHES); do \
	  echo "building bin/fleet-agent_linux_$$a"; \
	  CGO_ENABLED=0 GOOS=linux GOARCH=$$a $(GO) build -trimpath -buildvcs=false -ldflags '$(RELEASE_LDFLAGS)' -o bin/fleet-agent_linux_$$a ./cmd/fleet-agent || exit 1; \
	done
	$(GO) build -o $(RELEASE_TOOL) ./cmd/fleet-release

# make image: the node daemon's image for both architectures, as an OCI
# layout in bin/image; make image PUSH=registry/name:tag also pushes it with
# the Docker credentials of this user (docker login).
image: release-bins
	$(RELEASE_TOOL) image $(foreach a,$(ARCHES),-bin $(a)=bin/fleet-agent_linux_$(a)) \
	  -version $(VERSION) -revision $(COMMIT) -source $(SOURCE_URL) -epoch $(EPOCH) \
	  -layout bin/image $(if $(PUSH),-push $(PUSH))

# make deb: the Debian packages of both architectures, into bin/.
deb: release-bins
	@for a in $(ARCHES); do \
	  $(RELEASE_TOOL) deb -bin bin/fleet-agent_linux_$$a -arch $$a -version $(VERSION) -revision $(COMMIT) -epoch $(EPOCH) -o bin || exit 1; \
	done

# make release: dist/ with the binaries, the packages, the image as an OCI
# layout, a CycloneDX SBOM per artifact and SHA256SUMS over all of them.
release: release-bins
	rm -rf $(DIST) && mkdir -p $(DIST)
	@for a in $(ARCHES); do \
	  cp bin/fleet-agent_linux_$$a $(DIST)/ && \
	  $(RELEASE_TOOL) deb -bin bin/fleet-agent_linux_$$a -arch $$a -version $(VERSION) -revision $(COMMIT) -epoch $(EPOCH) -o $(DIST) || exit 1; \
	done
	$(RELEASE_TOOL) image $(foreach a,$(ARCHES),-bin $(a)=bin/fleet-agent_linux_$(a)) \
	  -version $(VERSION) -revision $(COMMIT) -source $(SOURCE_URL) -epoch $(EPOCH) -layout $(DIST)/fleet-agent-image
	@for a in $(ARCHES); do \
	  SOURCE_DATE_EPOCH=$(EPOCH) $(GO) run $(CYCLONEDX) bin -json -noserial -std -version $(VERSION) -output $(DIST)/fleet-agent_linux_$$a.cdx.json $(DIST)/fleet-agent_linux_$$a || exit 1; \
	done
	SOURCE_DATE_EPOCH=$(EPOCH) $(GO) run $(CYCLONEDX) mod -json -noserial -output $(DIST)/fleet-agent.mod.cdx.json .
	$(RELEASE_TOOL) sums $(DIST)
	@echo "wrote $(DIST)/ (check it: cd $(DIST) && sha256sum -c SHA256SUMS)"

install: build
	install -D -m 0755 $(BIN) $(DESTDIR)$(PREFIX)/bin/fleet-agent
	install -D -m 0644 deploy/systemd/fleet-agent.service $(DESTDIR)/etc/systemd/system/fleet-agent.service
	install -d -m 0750 $(DESTDIR)/etc/fleet-agent
	install -m 0640 deploy/config.example.yaml $(DESTDIR)/etc/fleet-agent/config.yaml.example

clean:
	rm -rf bin demo dist
