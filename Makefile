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
	@cmake --build $(FUZZ_BUILD) -j $(JOBS) --target fuzz_safetensors fuzz_tokenizer fuzz_hf_config fuzz_hf_dir

run: build
	@scripts/demo.sh $(BUILD)

# Every test: the sanitizer build of the suite (the full-size case excluded: it
# is the same code at a size ASan would make slow), short fuzz runs of the file
# parsers, then the whole suite on the release build (its summary last).
test: test-asan fuzz test-unit

test-asan: build-asan
	@echo "== AddressSanitizer + UndefinedBehaviorSanitizer + LeakSanitizer suite"
	@cd $(ASAN_BUILD) && ctest --output-on-failure -LE 'full|gpu' -j 2

# Each parser is fuzzed FUZZ_SECONDS; the first finding (a crash, a leak, a
# sanitizer report: UBSan halts on its first) ends the run, and its log is shown.
FUZZ_TARGETS = safetensors:fuzz/seeds:-max_len=4096 \
               tokenizer:fuzz/seeds_tokenizer:-max_len=8192:-dict=tests/tokenizer/fuzz_tokenizer.dict \
               hf_config:fuzz/seeds_hf_config:-max_len=4096 \
               hf_dir:fuzz/seeds_hf_dir:-max_len=4096
fuzz: build-fuzz
	@for t in $(FUZZ_TARGETS); do \
	  n=$$(echo $$t | cut -d: -f1); seeds=$$(echo $$t | cut -d: -f2); opts=$$(echo $$t | cut -d: -f3- | tr : ' '); \
	  echo "== libFuzzer: $$n, $(FUZZ_SECONDS) s"; mkdir -p $(FUZZ_BUILD)/corpus_$$n; \
	  $(FUZZ_BUILD)/fuzz_$$n -max_total_time=$(FUZZ_SECONDS) $$opts $(FUZZ_BUILD)/corpus_$$n $$seeds \
	    > $(FUZZ_BUILD)/fuzz_$$n.log 2>&1; rc=$$?; tail -n 2 $(FUZZ_BUILD)/fuzz_$$n.log; \
	  if [ $$rc -ne 0 ]; then echo "fuzz_$$n: FINDING (exit $$rc):"; tail -n 60 $(FUZZ_BUILD)/fuzz_$$n.log; exit $$rc; fi; \
	done

fuzz-long: build-fuzz
	@mkdir -p $(FUZZ_BUILD)/corpus_safetensors $(FUZZ_BUILD)/corpus_tokenizer $(FUZZ_BUILD)/corpus_hf_config \
	  $(FUZZ_BUILD)/corpus_hf_dir
	$(FUZZ_BUILD)/fuzz_safetensors -max_total_time=3600 -max_len=65536 -jobs=$(JOBS) $(FUZZ_BUILD)/corpus_safetensors fuzz/seeds
	$(FUZZ_BUILD)/fuzz_tokenizer -max_total_time=3600 -max_len=65536 -jobs=$(JOBS) \
	  -dict=tests/tokenizer/fuzz_tokenizer.dict $(FUZZ_BUILD)/corpus_tokenizer fuzz/seeds_tokenizer
	$(FUZZ_BUILD)/fuzz_hf_config -max_total_time=3600 -max_len=65536 -jobs=$(JOBS) $(FUZZ_BUILD)/corpus_hf_config fuzz/seeds_hf_config
	$(FUZZ_BUILD)/fuzz_hf_dir -max_total_time=3600 -max_len=65536 -jobs=$(JOBS) $(FUZZ_BUILD)/corpus_hf_dir fuzz/seeds_hf_dir

test-unit: build
	@echo "== release suite"
	@cd $(BUILD) && ctest --output-on-failure

test-gpu: build
	@cd $(BUILD) && ctest --output-on-failure -L gpu

bench: build
	@$(BUILD)/bench/bench_head

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(FUZZ_BUILD)
