# Ferry: the README's commands. `make run` and `make test` work on a fresh Debian 12 machine:
# they install the Debian packages they need first (as root, or with sudo).

BUILD      ?= build
ASAN_BUILD ?= build-asan
JOBS       ?= $(shell nproc)
PYTEST     = /usr/bin/python3 -m pytest -p no:cacheprovider

# Everything the build, the tests and the benchmark use, from Debian 12.
BUILD_PKGS = build-essential cmake pkg-config libssl-dev libyaml-dev libnghttp2-dev libpcre2-dev \
             libngtcp2-dev libngtcp2-crypto-gnutls-dev libnghttp3-dev libgnutls28-dev \
             zlib1g-dev libbrotli-dev libzstd-dev libsystemd-dev libhiredis-dev libc-ares-dev \
             libmodsecurity-dev modsecurity-crs libdeflate-dev
TEST_PKGS  = python3 python3-pytest python3-h2 python3-websockets python3-cryptography python3-jwt curl openssl nghttp2-client nginx-light clang libclang-rt-14-dev \
             ngtcp2-client ngtcp2-server redis-server prometheus iproute2 iptables libnss3-tools chromium \
             $(DEB_PKGS)
# `make deb` and tests/test_packaging.py: dpkg-shlibdeps, man page checks, systemd-analyze
# verify, the postinst's adduser
DEB_PKGS   = dpkg-dev groff-base man-db systemd adduser
# Node.js + npm drive Chromium (npm's playwright-core) in the browser tests. Installed from
# Debian only when no `npm` is on the machine: a Node.js from elsewhere (e.g. NodeSource, which
# bundles npm) conflicts with Debian's npm package.
NODE_PKGS  = nodejs npm
BENCH_PKGS = wrk nginx-light valgrind strace caddy mitmproxy haproxy lighttpd h2o \
             libnginx-mod-stream nghttp2-client libnginx-mod-http-modsecurity varnish trafficserver
PKGS       = $(BUILD_PKGS) $(TEST_PKGS)

SUDO = $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: all build run test deps bench-deps unit integration asan fuzz fuzz-smoke bench bench-quick bench-cost clean format check-style doc man install deb

all: build

deps:
	@missing=$$(for p in $(PKGS); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	command -v npm >/dev/null 2>&1 || missing="$$missing $(NODE_PKGS)"; \
	if [ -n "$$missing" ]; then \
	  echo "installing: $$missing"; \
	  $(SUDO) apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $$missing; \
	fi

bench-deps:
	@missing=$$(for p in $(BUILD_PKGS) $(TEST_PKGS) $(BENCH_PKGS); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	command -v npm >/dev/null 2>&1 || missing="$$missing $(NODE_PKGS)"; \
	if [ -n "$$missing" ]; then \
	  $(SUDO) apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $$missing; \
	fi

$(BUILD)/CMakeCache.txt:
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release

build: deps $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j $(JOBS)

# quiet: only compiler diagnostics and errors come before Ferry's banner
run: deps
	@[ -f $(BUILD)/CMakeCache.txt ] || cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release >/dev/null
	@cmake --build $(BUILD) -j $(JOBS) -- --no-print-directory -s >/dev/null || \
	  cmake --build $(BUILD) -j 1 -- --no-print-directory
	@./$(BUILD)/ferry

# unit + fuzz-corpus replay (ctest), every libFuzzer driver for a few seconds, integration
# (pytest), then all of it again under ASan+UBSan
test: build check-style
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)
	$(MAKE) fuzz-smoke
	FERRY_BIN=$(CURDIR)/$(BUILD)/ferry $(PYTEST) -q tests
	$(MAKE) asan

# the load generator is a peer tool, not the code under test: the Release one drives the
# sanitized server
asan: deps $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j $(JOBS) --target ferry-load
	cmake -S . -B $(ASAN_BUILD) -DCMAKE_BUILD_TYPE=Debug -DFY_SANITIZE=ON
	cmake --build $(ASAN_BUILD) -j $(JOBS)
	cd $(ASAN_BUILD) && ASAN_OPTIONS=detect_leaks=1 ctest --output-on-failure -j $(JOBS)
	FERRY_BIN=$(CURDIR)/$(ASAN_BUILD)/ferry FERRY_LOAD_BIN=$(CURDIR)/$(BUILD)/ferry-load \
	  FERRY_SANITIZED=1 $(PYTEST) -q tests

unit: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

integration: build
	FERRY_BIN=$(CURDIR)/$(BUILD)/ferry $(PYTEST) -v tests

# coverage-guided fuzzing with clang's libFuzzer, FUZZ_SECONDS each (tools/fuzz.sh);
# fuzz-smoke runs each driver briefly so that the drivers cannot stop building unnoticed
FUZZ_SECONDS ?= 60
fuzz: deps
	./tools/fuzz.sh $(FUZZ_SECONDS)

fuzz-smoke: deps
	./tools/fuzz.sh 3

# the full matrix of bench/run (docs/BENCHMARKS.md), then the ferry-load cross-check
bench: bench-deps build
	bench/run all
	bench/run xcheck

bench-quick: bench-deps build
	bench/run --quick static

# the older row harness with per-request instruction and syscall counts
bench-cost: bench-deps build
	/usr/bin/python3 bench/run.py --cost

check-style:
	./tools/check-style.sh

format:
	clang-format -i $$(git ls-files '*.c' '*.h')

doc: build
	./$(BUILD)/ferry doc-config > docs/CONFIG.md.new

# man pages ferry(1), ferry-load(1), ferry.yaml(5) into $(BUILD)/man, from the binaries'
# help and the directive tables (tools/gen-man.sh)
man: build
	./tools/gen-man.sh $(BUILD)/ferry $(BUILD)/man

# binaries, man pages, the systemd unit, the default page and (unless there is one) the
# default /etc/ferry/ferry.yaml; `make install PREFIX=/usr DESTDIR=/tmp/stage`
PREFIX     ?= /usr/local
DESTDIR    ?=
SYSCONFDIR ?= /etc
UNITDIR    ?= $(PREFIX)/lib/systemd/system
install: build
	DESTDIR="$(DESTDIR)" PREFIX="$(PREFIX)" SYSCONFDIR="$(SYSCONFDIR)" UNITDIR="$(UNITDIR)" \
	  ./packaging/install.sh $(BUILD)

# the Debian package $(BUILD)/ferry_VERSION-1_ARCH.deb from the Release build (dpkg-deb)
deb: build
	@[ "$$(sed -n 's/^CMAKE_BUILD_TYPE:[A-Z]*=//p' $(BUILD)/CMakeCache.txt)" = Release ] || \
	  { echo "make deb: $(BUILD) is not a Release build"; exit 1; }
	./packaging/mkdeb.sh $(BUILD) $(BUILD)

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) build-fuzz
