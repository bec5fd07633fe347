# dspark: `make run` (the main job) and `make test` (every test). Both install
# what is missing first (scripts/setup.sh), then build, then run.
BUILD      ?= build
ASAN_BUILD ?= build-asan
FUZZ_BUILD ?= build-fuzz
DSPARK_CUDA ?= auto
JOBS       ?= $(shell nproc)
FUZZ_SECONDS ?= 30
CMAKE_FLAGS ?=

.PHONY: all setup build build-asan build-fuzz run test test-unit test-asan fuzz fuzz-long test-gpu bench clean

all: build

setup:
	@scripts/setup.sh

build: setup
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release -DDSPARK_CUDA=$(DSPARK_CUDA) $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

build-asan: setup
	@cmake -S . -B $(ASAN_BUILD) -DCMAKE_BUILD_TYPE=Debug -DDSPARK_SANITIZE=ON -DDSPARK_CUDA=off $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(ASAN_BUILD) -j $(JOBS)

build-fuzz: setup
	@cmake -S . -B $(FUZZ_BUILD) -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=Debug -DDSPARK_FUZZ=ON -DDSPARK_CUDA=off >/dev/null
	@cmake --build $(FUZZ_BUILD) -j $(JOBS) --target fuzz_safetensors

run: build
	@scripts/demo.sh $(BUILD)

# Every test: the sanitizer build of the suite (the full-size case excluded: it
# is the same code at a size ASan would make slow), a short fuzz run of the
# safetensors parser, then the whole suite on the release build (its summary last).
test: test-asan fuzz test-unit

test-asan: build-asan
	@echo "== AddressSanitizer + UndefinedBehaviorSanitizer suite"
	@cd $(ASAN_BUILD) && ctest --output-on-failure -LE 'full|gpu' -j 2

fuzz: build-fuzz
	@echo "== libFuzzer: safetensors parser, $(FUZZ_SECONDS) s"
	@mkdir -p $(FUZZ_BUILD)/corpus
	@$(FUZZ_BUILD)/fuzz_safetensors -max_total_time=$(FUZZ_SECONDS) -max_len=4096 \
	  $(FUZZ_BUILD)/corpus fuzz/seeds > $(FUZZ_BUILD)/fuzz.log 2>&1; rc=$$?; \
	  tail -n 3 $(FUZZ_BUILD)/fuzz.log; [ $$rc -eq 0 ] || { tail -n 40 $(FUZZ_BUILD)/fuzz.log; exit $$rc; }

fuzz-long: build-fuzz
	@mkdir -p $(FUZZ_BUILD)/corpus
	$(FUZZ_BUILD)/fuzz_safetensors -max_total_time=3600 -max_len=65536 -jobs=$(JOBS) $(FUZZ_BUILD)/corpus fuzz/seeds

test-unit: build
	@echo "== release suite"
	@cd $(BUILD) && ctest --output-on-failure

test-gpu: build
	@cd $(BUILD) && ctest --output-on-failure -L gpu

bench: build
	@$(BUILD)/dspark bench head

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(FUZZ_BUILD)
