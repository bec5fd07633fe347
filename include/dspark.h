/* dspark: a C runtime for DSpark speculative decoding.
 *
 * The one public header: status codes, tensor views, safetensors files, the
 * communicator, the backend (CPU, or CUDA over one or several GPUs of one
 * process), and the components that run on a backend (the Markov head now).
 * Handles are opaque; every function that can fail because of what the caller
 * gave it returns a dsp_status, and dsp_error_message() holds the readable
 * reason (file, tensor, what is wrong) for the calling thread. */
#ifndef DSPARK_H
#define DSPARK_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- status ------------------------------------------------------------- */
typedef enum {
  DSP_OK = 0,
  DSP_ERR_ARG,         /* an argument is out of its domain */
  DSP_ERR_IO,          /* a file could not be opened, read, mapped or written */
  DSP_ERR_FORMAT,      /* a file is malformed (header, JSON, offsets) */
  DSP_ERR_DTYPE,       /* a tensor has a dtype we do not accept here */
  DSP_ERR_SHAPE,       /* shapes disagree */
  DSP_ERR_RANGE,       /* an index or value is out of range (token id, temperature) */
  DSP_ERR_MISSING,     /* a required tensor or key is absent */
  DSP_ERR_NOMEM,       /* an allocation failed or an arena is full */
  DSP_ERR_COMM,        /* a collective failed, or another rank reported an error */
  DSP_ERR_DEVICE,      /* a device is missing or a device call failed */
  DSP_ERR_UNSUPPORTED  /* valid, but this build or layout cannot do it */
} dsp_status;

const char *dsp_status_name(dsp_status s);
/* The last error's message for this thread ("" after success). */
const char *dsp_error_message(void);
/* Records a formatted message for this thread and returns s (for callbacks
 * that hand dspark a failure, e.g. a weights function). */
dsp_status dsp_fail(dsp_status s, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* ---- the library and its settings --------------------------------------- */
const char *dsp_version(void);            /* "dspark 0.2" */
/* Compiler and the backends this build has, e.g. "gcc 12.2.0; backends cpu, mpi, cuda, nccl". */
const char *dsp_build_info(void);
/* Validates every DSPARK_* environment variable once (README lists them):
 * DSP_ERR_ARG naming the variable and its accepted values when one does not
 * parse. Programs call it at start-up; everything else calls it implicitly. */
dsp_status dsp_settings_check(void);
int dsp_settings_quiet(void);   /* DSPARK_QUIET=1: no start-up report lines */
int dsp_settings_verbose(void); /* DSPARK_VERBOSE=1: kernel choices and check counts too */

/* ---- tensors ------------------------------------------------------------- */
typedef enum { DSP_BF16 = 0, DSP_F32, DSP_I64, DSP_I32, DSP_F16, DSP_DTYPE_COUNT } dsp_dtype;
#define DSP_MAX_DIMS 4

/* A view: data pointer, dtype, shape and strides in elements. Views need not be
 * contiguous; every kernel that takes one honours its strides. */
typedef struct {
  void *data;
  dsp_dtype dtype;
  int32_t ndim;
  int64_t shape[DSP_MAX_DIMS];
  int64_t stride[DSP_MAX_DIMS];
} dsp_tensor;

typedef uint16_t dsp_bf16;

size_t dsp_dtype_size(dsp_dtype t);
const char *dsp_dtype_name(dsp_dtype t);
/* A contiguous row-major view of `ndim` (<= DSP_MAX_DIMS) dims over data. */
dsp_tensor dsp_tensor_view(void *data, dsp_dtype dt, int32_t ndim, const int64_t *shape);
dsp_tensor dsp_tensor_2d(void *data, dsp_dtype dt, int64_t rows, int64_t cols);
int64_t dsp_tensor_numel(const dsp_tensor *t);
/* Rows [begin, end) of dim 0, keeping strides. */
dsp_tensor dsp_tensor_rows(const dsp_tensor *t, int64_t begin, int64_t end);

/* ---- safetensors files ----------------------------------------------------
 * Layout: u64 little-endian N, then N bytes of a UTF-8 JSON object mapping each
 * tensor name to {"dtype", "shape", "data_offsets": [begin, end]} (offsets
 * relative to the first byte after the header), plus an optional
 * "__metadata__" object of string -> string; then the data section.
 *
 * Reader: dsp_st_open validates the whole header before returning, so every
 * accessor afterwards can trust offsets and sizes. Open accepts every dtype
 * name the format defines (F64, U8, BOOL, F8_*, ...) and any number of dims;
 * the accessors that hand out data (info, view, read_rows) refuse a dtype
 * that has no dsp_dtype (DSP_ERR_DTYPE) and more than DSP_MAX_DIMS dims
 * (DSP_ERR_SHAPE). Data ranges may leave gaps but never share a byte (empty
 * ranges share none). Tensors are listed in the order of their data offsets
 * (file order; equal offsets by end, then name). */
#define DSP_ST_MAX_HEADER ((uint64_t)100 * 1024 * 1024) /* longer headers are refused as corrupt */

typedef struct dsp_st_file dsp_st_file;

/* What open learned about one tensor, whatever its dtype. */
typedef struct {
  const char *name;
  const char *dtype;     /* the file's dtype name, e.g. "BF16", "F64" */
  int32_t ndim;          /* may exceed DSP_MAX_DIMS */
  const int64_t *shape;  /* ndim values */
  uint64_t begin, end;   /* byte range within the data section */
} dsp_st_entry;

/* Opens and maps `path` read-only (MAP_PRIVATE) and validates it.
 * DSP_ERR_IO when it cannot be opened or mapped, DSP_ERR_FORMAT when malformed. */
dsp_status dsp_st_open(const char *path, dsp_st_file **out);
/* The same validation over a caller's buffer, which must outlive the handle;
 * `label` stands for the path in messages and dsp_st_path. */
dsp_status dsp_st_open_memory(const void *buf, size_t len, const char *label, dsp_st_file **out);
void dsp_st_close(dsp_st_file *f);

const char *dsp_st_path(const dsp_st_file *f);
int dsp_st_count(const dsp_st_file *f);
/* Name of tensor i (0 <= i < count), in data-offset order; NULL out of range. */
const char *dsp_st_name(const dsp_st_file *f, int i);
/* Everything about tensor i; NULL out of range. Valid until dsp_st_close. */
const dsp_st_entry *dsp_st_entry_at(const dsp_st_file *f, int i);
/* Value of a "__metadata__" key; NULL when absent. */
const char *dsp_st_metadata(const dsp_st_file *f, const char *key);

/* dtype and shape of `name` (any output may be NULL). DSP_ERR_MISSING if
 * absent, DSP_ERR_DTYPE if its dtype has no dsp_dtype, DSP_ERR_SHAPE if it has
 * more than DSP_MAX_DIMS dims. */
dsp_status dsp_st_info(const dsp_st_file *f, const char *name, dsp_dtype *dt, int32_t *ndim,
                       int64_t shape[DSP_MAX_DIMS]);
/* A contiguous view into the file's bytes, touching none of them. The data is
 * read-only (a private read-only mapping, or the caller's buffer): callers
 * must not write through it. DSP_ERR_UNSUPPORTED when the tensor's bytes are
 * not aligned to its element size (a writer that packed dtypes of different
 * widths); dsp_st_read_rows copies such tensors. Errors as dsp_st_info. */
dsp_status dsp_st_view(const dsp_st_file *f, const char *name, dsp_tensor *out);
/* Copies rows [row0, row0 + nrows) of dim 0 to dst (contiguous, row-major).
 * Only those rows' bytes are read, so a tensor-parallel rank that reads its
 * own rows never faults in the others' pages. DSP_ERR_RANGE for a row range
 * outside [0, shape[0]], DSP_ERR_SHAPE for a 0-dim tensor; errors as info. */
dsp_status dsp_st_read_rows(const dsp_st_file *f, const char *name, int64_t row0, int64_t nrows, void *dst);

/* Writer. Tensors are copied when added and laid out in the order added,
 * without padding between them (so a view of a later tensor is aligned only if
 * the bytes before it are a multiple of its element size). The header is
 * padded with spaces to a multiple of 8 bytes. Nothing appears at `path` until
 * dsp_st_writer_finish succeeds: it writes `path`.tmp.<pid> and renames it. */
typedef struct dsp_st_writer dsp_st_writer;

dsp_status dsp_st_writer_create(const char *path, dsp_st_writer **out);
/* Copies t's elements (any strides) under `name`. DSP_ERR_ARG for a duplicate,
 * empty, reserved ("__metadata__") or non-UTF-8 name, or a NULL data pointer
 * with elements; DSP_ERR_DTYPE / DSP_ERR_SHAPE for a bad dtype or shape. A
 * failed add leaves the writer as it was. */
dsp_status dsp_st_writer_add(dsp_st_writer *w, const char *name, const dsp_tensor *t);
/* Sets a "__metadata__" entry; a later value for the same key replaces it. */
dsp_status dsp_st_writer_meta(dsp_st_writer *w, const char *key, const char *value);
/* Writes the file (DSP_ERR_IO on failure, leaving nothing at `path` nor a
 * temporary file) and frees w in every case. */
dsp_status dsp_st_writer_finish(dsp_st_writer *w);
/* Frees w; writes nothing. */
void dsp_st_writer_abort(dsp_st_writer *w);

/* ---- the communicator -----------------------------------------------------
 * One interface, several engines: self (one rank), MPI (CPUs, and to
 * bootstrap), NCCL (GPUs). Host engines take host buffers; NCCL takes device
 * buffers on the stream its backend uses (and host buffers for the control
 * plane). Ranks are numbered 0..size-1; gathers are in rank order.
 *
 * Collectives are called by every rank, in the same order, with the same sizes.
 * Zero bytes / zero elements are allowed (buffers may then be NULL). Counts
 * above INT_MAX work on MPI (split internally). Failures are DSP_ERR_COMM with
 * file:line and the engine's message; bad arguments are DSP_ERR_ARG/DSP_ERR_DTYPE.
 *
 * Failing together, never hanging: a rank that fails alone must not leave the
 * others waiting in a collective. Callers therefore call dsp_comm_agree(c, s)
 * at every point where ranks can diverge (file reads, allocation, input
 * checks), so all ranks return the same error; for an error that cannot be
 * agreed on they end with dsp_comm_abort, or exit non-zero (under mpirun a
 * rank that exits without MPI_Finalize makes mpirun end the others). */
typedef struct dsp_comm dsp_comm;
typedef enum { DSP_REDUCE_SUM = 0, DSP_REDUCE_MAX } dsp_reduce_op;

/* One rank: collectives are copies, the barrier does nothing, abort exits. */
dsp_status dsp_comm_self_create(dsp_comm **out);
/* MPI_COMM_WORLD; initialises MPI when nobody has (and finalises it at free). */
dsp_status dsp_comm_mpi_create(dsp_comm **out);
/* MPI when this process was started by an MPI launcher (mpirun sets its
 * variables), else self: a plain run needs no MPI daemon. */
dsp_status dsp_comm_auto_create(dsp_comm **out);
/* NCCL over the ranks of `mpi` (one process per GPU: `device` is this rank's
 * GPU; the unique id travels over `mpi`, which must outlive the result).
 * DSP_ERR_UNSUPPORTED in a build without NCCL. */
dsp_status dsp_comm_nccl_create(dsp_comm *mpi, int device, dsp_comm **out);
/* NCCL over n GPUs driven by this one process: out[i] is rank i on devices[i];
 * each is used from its own thread. */
dsp_status dsp_comm_nccl_create_group(int n, const int *devices, dsp_comm **out);
/* n ranks that are threads of this process (the CPU backend's devices):
 * out[i] is rank i, each used from its own thread; collectives go through
 * shared memory, F32 sums in rank order. Kind "threads". When a device's job
 * of a backend fails alone, its peers' collectives in that job return
 * DSP_ERR_COMM instead of waiting for it, and the backend reports the device
 * that failed first. */
dsp_status dsp_comm_threads_create_group(int n, dsp_comm **out);

int dsp_comm_rank(const dsp_comm *c);
int dsp_comm_size(const dsp_comm *c);
const char *dsp_comm_kind(const dsp_comm *c); /* "self", "mpi", "nccl", "threads" */
/* recv holds size * bytes: rank r's `bytes` at offset r * bytes. In place when
 * send == recv + rank * bytes; other overlaps are not allowed. */
dsp_status dsp_comm_allgather(dsp_comm *c, const void *send, void *recv, size_t bytes);
dsp_status dsp_comm_bcast(dsp_comm *c, void *buf, size_t bytes, int root);
/* send == recv is allowed (in place). dt: DSP_F32, DSP_I32, DSP_I64. Every rank
 * gets the same result. An F32 SUM is taken in rank order, ((x0 + x1) + x2) +
 * ..., whatever the count, so it is the same on every run, message size and
 * engine (MPI and NCCL over 3 or more ranks exchange the partials and add them
 * in that order themselves; their own reductions associate by message size). */
dsp_status dsp_comm_allreduce(dsp_comm *c, const void *send, void *recv, size_t count, dsp_dtype dt,
                              dsp_reduce_op op);
dsp_status dsp_comm_barrier(dsp_comm *c);
/* Every rank passes its own status; every rank gets the worst (the first
 * non-OK by rank order), and on failure a message naming the failing rank and
 * its reason: with R the lowest rank that failed, every rank (R too) returns
 * R's status with the message "rank R: <R's dsp_error_message()>". When all
 * pass DSP_OK it returns DSP_OK and leaves the message alone. A collective
 * failure inside returns DSP_ERR_COMM. */
dsp_status dsp_comm_agree(dsp_comm *c, dsp_status local);
/* Ends every rank with exit code `code`: MPI_Abort on MPI, exit on self. c may be NULL. */
void dsp_comm_abort(dsp_comm *c, int code) __attribute__((noreturn));
/* NULL is fine. MPI: finalises MPI with the last communicator if we started it. */
void dsp_comm_free(dsp_comm *c);

/* ---- the backend ------------------------------------------------------------
 * Where components run their operations: the CPU (OpenMP threads; tensor
 * parallelism over the ranks of an MPI communicator, or over threads of this
 * process), or CUDA GPUs (one GPU
 * per process with NCCL bootstrapped over MPI, or several GPUs driven by one
 * process with an NCCL group of its own). The tensor-parallel group is the
 * communicator's processes times the GPUs each drives; TP rank r owns the
 * r-th equal part of every split weight. */
typedef struct dsp_backend dsp_backend;
typedef enum { DSP_BACKEND_CPU = 0, DSP_BACKEND_CUDA } dsp_backend_kind;

typedef struct {
  dsp_backend_kind kind;
  /* The processes of the TP group (borrowed; must outlive the backend). NULL:
   * this process alone. */
  dsp_comm *comm;
  /* CUDA: GPUs this process drives (0 or 1: one GPU, under mpirun the local
   * rank's, else GPU 0; N > 1: GPUs 0..N-1, not under mpirun). CPU: 0 or 1,
   * or N > 1 TP ranks as threads of this process sharing its cores (not
   * under mpirun; the caller's thread runs rank 0). */
  int32_t devices;
} dsp_backend_config;

/* DSP_ERR_UNSUPPORTED for CUDA in a build without it; DSP_ERR_DEVICE when the
 * GPUs asked for are not there. The CPU backend also sets this process's
 * thread count (DSPARK_THREADS, else the host's cores shared among its ranks). */
dsp_status dsp_backend_create(const dsp_backend_config *cfg, dsp_backend **out);
void dsp_backend_free(dsp_backend *b);
dsp_backend_kind dsp_backend_kind_of(const dsp_backend *b);
const char *dsp_backend_kind_name(dsp_backend_kind k); /* "cpu", "cuda" */
/* 1 when this build has the backend (CUDA: and a GPU is visible). */
int dsp_backend_available(dsp_backend_kind k);
int32_t dsp_backend_tp_size(const dsp_backend *b);
/* This process's first TP rank (its GPUs hold ranks tp_rank0 .. tp_rank0 + devices - 1). */
int32_t dsp_backend_tp_rank0(const dsp_backend *b);
int32_t dsp_backend_devices(const dsp_backend *b);
dsp_comm *dsp_backend_comm(const dsp_backend *b);
/* One line, e.g. "cpu: avx512f kernels, 2 threads" or "cuda: NVIDIA H200 x1". */
const char *dsp_backend_describe(const dsp_backend *b);

/* ---- the Markov head (DESIGN §1-§3) ----------------------------------------
 * Vocabulary rows are split over TP ranks: rank r of P owns global rows
 * [r*Vr, (r+1)*Vr) with Vr = ceil(Vp / P); rows >= Vp are internal padding and
 * rows >= V (the real vocabulary) are never selected. */
typedef enum { DSP_PATH_AUTO = 0, DSP_PATH_ORIGINAL, DSP_PATH_SHARDED, DSP_PATH_REPLICATED } dsp_path;
typedef enum { DSP_CONTRACT_BF16 = 0, DSP_CONTRACT_FP32_ADD } dsp_contract;

typedef struct {
  int64_t vocab;        /* V: real vocabulary size (ids >= V never win) */
  int64_t vocab_padded; /* Vp: rows in the weight files (Vp >= V) */
  int64_t hidden;       /* H */
  int64_t rank;         /* R: Markov rank */
  int64_t gamma;        /* drafted tokens per proposal */
  int32_t max_batch;    /* largest B a proposal may have */
  dsp_path path;        /* AUTO = sharded where eligible, else original */
  dsp_contract contract;
  int32_t broadcast;    /* per-step broadcast of tokens from rank 0 (default 1) */
} dsp_markov_config;

/* One TP rank's weights as host views (bf16, rows contiguous). lm_local /
 * w2_local: the rank's rows [r*Vr, min((r+1)*Vr, Vp)); w1: all Vp rows
 * (replicated); w2_full: all Vp rows, needed by the original and replicated
 * paths (has_w2_full = 0: the sharded path only). The views need only live
 * through dsp_markov_head_create. */
typedef struct {
  dsp_tensor lm_local, w1, w2_local, w2_full;
  int has_w2_full;
} dsp_markov_weights;

/* Gives TP rank `tp_rank` of `tp_size` its weights (called once per rank this
 * process holds: several times for a backend driving several GPUs). */
typedef dsp_status (*dsp_markov_weights_fn)(void *ctx, int32_t tp_size, int32_t tp_rank, dsp_markov_weights *w);

typedef struct {
  int32_t batch;              /* B <= max_batch */
  const dsp_tensor *hidden;   /* [B, gamma, H] BF16 view */
  const int64_t *anchor;      /* [B] */
  const float *temperature;   /* [B] or NULL (all greedy); 0 = greedy row */
  const uint64_t *seed;       /* [B] or NULL (0) */
  const int64_t *position;    /* [B] or NULL (0): the anchor's absolute position */
  int32_t slots;              /* the slots wanted, 1 .. gamma (0: all), without logits: the later slots' tokens
                                 are unspecified (the CPU head skips their steps) */
} dsp_markov_inputs;

typedef struct {
  int64_t *tokens;            /* [B * gamma] */
  /* Optional [B, gamma, V] view (BF16, or F32 for fp32-add): corrected logits.
   * Filled on every rank when given; sampled batches compute them anyway. */
  dsp_tensor *logits;
} dsp_markov_outputs;

typedef struct dsp_markov_head dsp_markov_head;

/* Rank's global row range for a TP split. */
void dsp_markov_rows(int64_t vocab_padded, int size, int rank, int64_t *row0, int64_t *rows_per_rank,
                     int64_t *rows_real);
/* Collective over the backend's TP group. */
dsp_status dsp_markov_head_create(dsp_backend *be, const dsp_markov_config *cfg, dsp_markov_weights_fn weights,
                                  void *ctx, dsp_markov_head **out);
dsp_status dsp_markov_head_propose(dsp_markov_head *h, const dsp_markov_inputs *in, dsp_markov_outputs *out);
/* The largest max_batch a head on this backend takes (CUDA: the fused kernels'
 * padded batch, 128; the CPU: no limit, INT32_MAX). */
int32_t dsp_markov_max_batch(const dsp_backend *be);
/* The one start-up line, e.g. "dspark: markov head greedy: W2 sharded over TP4,
 * bf16 local top-1; sampling: full logits"; with DSPARK_VERBOSE=1 a second
 * line of backend detail (kernels, checks, graphs) follows after a newline. */
const char *dsp_markov_head_report(const dsp_markov_head *h);
dsp_path dsp_markov_head_greedy_path(const dsp_markov_head *h);
/* Switch the greedy path of a live head (benchmarks alternate paths on one set
 * of weights). ORIGINAL and REPLICATED need w2_full; an ineligible SHARDED
 * request falls back to ORIGINAL, as at creation. DSP_ERR_UNSUPPORTED on
 * CUDA, whose path is captured in its graphs. */
dsp_status dsp_markov_head_set_path(dsp_markov_head *h, dsp_path p);
const char *dsp_path_name(dsp_path p);
/* Wall-clock milliseconds of the last proposal on this process: LM-head
 * product (with the base all-gather where the path has one) and the gamma
 * Markov steps (CPU; on CUDA the whole proposal counts as lm_ms). */
void dsp_markov_head_last_timing(const dsp_markov_head *h, double *lm_ms, double *tail_ms);
void dsp_markov_head_free(dsp_markov_head *h);
/* Validates a proposal's inputs against a config (batch, hidden shape, anchor
 * range, temperature, position). */
dsp_status dsp_markov_check_inputs(const dsp_markov_config *cfg, const dsp_markov_inputs *in);

/* Weights and inputs from safetensors files (the layouts of `dspark head`).
 * A rank maps the whole file but touches only its own rows of lm_head and
 * markov_w2. Fills cfg's vocab, vocab_padded, hidden and rank from the file
 * (other fields untouched) and w with views into it. need_full: all of W2. */
dsp_status dsp_markov_weights_from_file(dsp_st_file *f, int32_t tp_size, int32_t tp_rank, int need_full,
                                        dsp_markov_config *cfg, dsp_markov_weights *w);

typedef struct {
  dsp_st_file *file;
  dsp_tensor hidden;       /* [B, gamma, H] BF16 view into the file */
  int64_t *anchor;         /* [B], owned */
  float *temperature;      /* [B] or NULL, owned */
  uint64_t *seed;          /* [B] or NULL, owned */
  int64_t *position;       /* [B] or NULL, owned */
  int32_t batch;
  int64_t gamma;
} dsp_markov_input_file;

/* Reads I and checks it against cfg (H, V): shapes, dtypes, ranges. */
dsp_status dsp_markov_inputs_load(const char *path, const dsp_markov_config *cfg, dsp_markov_input_file *in);
void dsp_markov_input_file_free(dsp_markov_input_file *in);
dsp_markov_inputs dsp_markov_input_file_view(const dsp_markov_input_file *in);

/* ---- the target model (Qwen3 from a Hugging Face directory) -----------------
 * Prefill, decode and verify are one call: each sequence of a batch appends
 * its new tokens to its slot of the KV cache, causal among themselves and
 * over what the slot holds, and gets logits (greedy ids, sampled ids) and the
 * hidden-state taps of every new position. A position's results are the same
 * bits whatever else is in the batch and however its tokens were split over
 * calls. Heads and MLP columns are split over the backend's TP ranks, the LM
 * head by vocabulary rows (logits stay sharded; selection exchanges one
 * (value, id) pair per row). Numerics: docs/CONTRACTS.md, "The models". */
typedef struct dsp_target dsp_target;

typedef struct {
  int32_t max_seqs;    /* sequence slots of the KV cache (>= 1) */
  int32_t max_len;     /* positions per slot (prompt, generated tokens, a verify block) */
  int32_t max_tokens;  /* most new tokens of one call, all sequences together */
  const int32_t *taps; /* hidden-state taps: layer ids l (the raw output of decoder layer l) */
  int32_t ntaps;
} dsp_target_options;

typedef struct {
  char arch[64];
  int64_t vocab, hidden, layers, heads, kv_heads, head_dim, intermediate, max_positions;
  double rope_theta, eps;
  int32_t tied;
  int64_t eos[8];
  int32_t n_eos;
  int64_t bos; /* -1: none */
  int32_t max_seqs, max_len, max_tokens; /* the cache and call sizes it was loaded with */
} dsp_target_info;

typedef struct {
  int32_t nseq;
  const int32_t *slot;  /* [nseq], distinct, in [0, max_seqs) */
  const int32_t *count; /* [nseq] new tokens, >= 1 */
  const int32_t *tokens; /* [sum of count], sequence by sequence */
  /* Which positions select a next token: 0 every new position, 1 the last
   * new position of each sequence (prefill: logits of the prompt's last). */
  int32_t last_only;
  const float *temperature; /* [nseq] or NULL (greedy); T > 0: Gumbel-max draw */
  const uint64_t *seed;     /* [nseq] or NULL (0) */
} dsp_target_batch;

typedef struct {
  int64_t *next;        /* [rows] the selected id of each selecting position, or NULL */
  dsp_tensor *logits;   /* [rows, V] BF16 host view of those positions' logits, or NULL */
  dsp_tensor *taps;     /* [ntaps, sum of count, H] BF16 host view, or NULL */
} dsp_target_outputs;

/* Loads dir (config.json, generation_config.json, model.safetensors or the
 * shards of model.safetensors.index.json); each TP rank reads only its rows.
 * Collective over the backend's TP group. */
dsp_status dsp_target_load(dsp_backend *be, const char *dir, const dsp_target_options *opt, dsp_target **out);
const dsp_target_info *dsp_target_info_of(const dsp_target *t);
/* One start-up line: architecture, sizes, TP layout, cache. */
const char *dsp_target_report(const dsp_target *t);
/* Collective. rows of the outputs = nseq when last_only, else sum of count. */
dsp_status dsp_target_forward(dsp_target *t, const dsp_target_batch *b, dsp_target_outputs *out);
/* Cached positions of a slot. */
int64_t dsp_target_length(const dsp_target *t, int32_t slot);
/* Keeps the first len positions of a slot (rollback after a rejection). */
dsp_status dsp_target_truncate(dsp_target *t, int32_t slot, int64_t len);
void dsp_target_free(dsp_target *t);

/* ---- the DSpark draft (DeepSpec's Qwen3DSparkModel checkpoints) ------------
 * One proposal per sequence: the target's taps of the positions the draft's
 * context cache lacks are appended to it (ctx = hidden_norm(fc(taps)); every
 * draft layer's K, V of ctx), then the block [anchor, mask x (gamma-1)] at
 * positions start .. start+gamma-1 (start = the context's length) runs the
 * draft's layers (non-causal over the context and the whole block), and the
 * Markov head drafts gamma tokens from its final-normed states; slot k
 * predicts position start+k+1. By default the block has block_size rows, as in
 * training, and a smaller gamma drafts its first gamma slots; with block_gamma it
 * has gamma rows (fewer rows to run, slightly different states). The block's K/V never stay in the cache. The
 * draft embeds and projects with its target's embedding and LM head. */
typedef struct dsp_draft dsp_draft;

typedef struct {
  int32_t max_seqs;    /* context-cache slots (>= 1) */
  int32_t max_len;     /* positions per slot: the context plus a block of block_size */
  int32_t max_ctx;     /* most new context rows of one call, all sequences together */
  int32_t gamma;       /* drafted tokens, 1 .. block_size (0: block_size) */
  int32_t block_gamma; /* 1: blocks of gamma rows [anchor, mask x (gamma-1)]; 0: of block_size rows */
  dsp_path path;       /* the Markov head's greedy path */
  int32_t no_broadcast; /* 1: the head's per-step broadcast of tokens from rank 0 off (TP > 1) */
} dsp_draft_options;

typedef struct {
  int64_t layers, block_size, gamma, mask_token_id, markov_rank;
  int32_t taps[64];    /* target_layer_ids: the target must be loaded with these taps */
  int32_t ntaps;
  int32_t confidence;  /* the checkpoint has a confidence head */
  int32_t own_embeddings_differ; /* the draft's own embed_tokens / lm_head differ from the target's (unused) */
} dsp_draft_info;

typedef struct {
  int32_t nseq;
  const int32_t *slot;            /* [nseq] distinct */
  const dsp_tensor *ctx;          /* [ntaps, rows, H] BF16 host: target taps (dsp_target_outputs.taps) */
  const int32_t *ctx_row0;        /* [nseq] first row of ctx this sequence appends */
  const int32_t *ctx_count;       /* [nseq] rows it appends (>= 0) */
  const int32_t *anchor;          /* [nseq] the last committed token, at position start */
  const float *temperature;       /* [nseq] or NULL (greedy) */
  const uint64_t *seed;           /* [nseq] or NULL (0) */
  int32_t append_only;            /* 1: append the context rows and propose nothing (a long prompt in pieces) */
  int32_t ctx_target;             /* 1: ctx_row0 / ctx_count index the rows of the target's last forward, read
                                     where the target keeps its taps (no host copy); ctx is then unused */
  int32_t rows;                   /* this call's block rows, 1 .. the draft's (0: all): [anchor, mask x (rows-1)],
                                     the block of a draft loaded with block_gamma and gamma rows; it drafts
                                     min(rows, gamma) slots, the others' tokens -1 and confidences 0 (no logits
                                     output below gamma rows; runs uncaptured on CUDA) */
} dsp_draft_batch;

typedef struct {
  int64_t *tokens;                /* [nseq * gamma] */
  dsp_tensor *logits;             /* [nseq, gamma, V] BF16 host view (the head's corrected logits) or NULL */
  float *confidence;              /* [nseq * gamma] sigmoids (the checkpoint's confidence head) or NULL */
} dsp_draft_outputs;

/* dir: a DeepSpec draft directory for `target` (same hidden size, heads and
 * vocabulary; target_layer_ids among its layers but not the last). Collective. */
dsp_status dsp_draft_load(dsp_backend *be, const char *dir, const dsp_target *target, const dsp_draft_options *o,
                          dsp_draft **out);
const dsp_draft_info *dsp_draft_info_of(const dsp_draft *d);
/* A draft directory's config alone (its taps, to load the target with them). */
dsp_status dsp_draft_read_info(const char *dir, dsp_draft_info *out);
const char *dsp_draft_report(const dsp_draft *d);
/* Proposal graphs captured so far (CUDA, one device, TP 1: one per head bucket and variant; 0 on the CPU). */
int32_t dsp_draft_graphs(const dsp_draft *d);
/* Collective. */
dsp_status dsp_draft_propose(dsp_draft *d, const dsp_draft_batch *b, dsp_draft_outputs *out);
int64_t dsp_draft_length(const dsp_draft *d, int32_t slot);
/* Keeps the first len context positions of a slot. */
dsp_status dsp_draft_truncate(dsp_draft *d, int32_t slot, int64_t len);
void dsp_draft_free(dsp_draft *d);

/* ---- generation: plain decoding with the target ----------------------------
 * Prompts in slots 0 .. nseq-1 (chunked prefill of at most max_tokens tokens
 * a call), then one token per unfinished sequence per call; more prompts than
 * the target has slots run in waves of max_seqs. Greedy at T == 0,
 * else Gumbel-max keyed by (seed, position, id): a sequence's output does not
 * depend on the others of its batch. Collective: every process runs the same
 * loop and sees the same tokens. */
typedef struct {
  int32_t max_new;       /* new tokens per sequence, >= 1 (the end-of-sequence id counts) */
  float temperature;     /* 0: greedy */
  uint64_t seed;         /* every sequence's noise key unless seeds is set */
  const uint64_t *seeds; /* [nseq] or NULL */
  int32_t ignore_eos;    /* 1: never stop at the config's end-of-sequence ids */
} dsp_generate_options;

typedef struct {
  int64_t prompt_tokens, new_tokens;
  int64_t prefill_calls, decode_calls; /* target forwards */
  double prefill_ms;                   /* prompts through the first new token of each sequence */
  double decode_ms;                    /* the rest */
  int64_t drafted, accepted;           /* speculative decoding: draft tokens proposed and kept */
  int64_t rounds;                      /* sequence-rounds (one proposal and its verification each) */
  int64_t plain_rounds;                /* gamma auto: sequence-rounds without a proposal (decode steps) */
  int64_t tried[64], kept[64];         /* per draft slot k: proposals reaching it, and accepted there */
  double draft_ms, verify_ms;          /* time in the draft's proposals and the target's verifications */
} dsp_generate_stats;

/* Called with each sequence's newly fixed tokens, in order; the last of a
 * sequence that stopped at an end-of-sequence id is that id. */
typedef void (*dsp_token_fn)(void *ctx, int32_t seq, const int32_t *ids, int32_t n);

/* finished: [nseq] or NULL, set to 1 where a sequence stopped at an
 * end-of-sequence id, 0 where it reached max_new. */
dsp_status dsp_generate(dsp_target *t, int32_t nseq, const int32_t *const *prompts, const int32_t *lens,
                        const dsp_generate_options *o, dsp_token_fn fn, void *ctx, int32_t *finished,
                        dsp_generate_stats *st);

/* ---- speculative decoding with a DSpark draft (DESIGN §2 item 6) -----------
 * Per round and sequence: the draft proposes gamma tokens after the anchor
 * (the last committed token), the target verifies [anchor, drafts] in one
 * call, the accepted prefix and the target's bonus token are committed, the
 * target's cache is cut back to them and the draft's context gets their taps.
 * Greedy (T < 1e-5): the longest prefix equal to the target's argmax, then its
 * argmax: exactly plain greedy decoding. Sampling: accept d with probability
 * min(1, p(d) / q(d)) (p, q: softmax of the target's and the Markov head's
 * corrected logits over T), on a rejection draw from normalize(max(p - q, 0))
 * (p when that mass is 0), after a full accept the bonus from p; uniforms keyed
 * by (seed, position, purpose): the target's distribution, reproducibly.
 * Sampling with verify DSP_VERIFY_EXACT instead: the longest prefix equal to
 * the target's own Gumbel-max draws (contract 5's noise, the draft's too),
 * then its draw: exactly plain sampled decoding's tokens, whatever gamma. The
 * target must be loaded with the draft's taps. Any number of prompts: the
 * running batch holds as many as both models have slots; a finished sequence
 * leaves it and the next prompt is prefilled into its slot (the tokens are the
 * same as in one batch). prefill_ms covers the first admission; later prefill
 * calls count in prefill_calls and their time in decode_ms. */
/* dsp_spec_options.gamma: verify as many of the draft's tokens per round as
 * pay, from the acceptance so far and the verify's measured cost per token
 * (greedy or DSP_VERIFY_EXACT, where the tokens do not depend on it). */
#define DSP_GAMMA_AUTO (-1)
/* dsp_spec_options.verify, for sampled rows: DSP_VERIFY_REJECTION accepts a
 * draft with probability min(1, p / q) (the target's distribution); EXACT
 * accepts it where it equals the target's own draw at its position (the
 * target's tokens: those of dsp_generate with the same seed). */
enum { DSP_VERIFY_REJECTION = 0, DSP_VERIFY_EXACT = 1 };
typedef struct {
  dsp_generate_options gen;
  int32_t gamma;   /* drafted tokens per round, 1 .. the draft's gamma (0: the draft's; DSP_GAMMA_AUTO) */
  float p_min;     /* confidence threshold in [0, 1): a proposal is cut before its first slot below it (0: none) */
  int32_t verify;  /* sampled rows' acceptance: DSP_VERIFY_REJECTION (0) or DSP_VERIFY_EXACT */
} dsp_spec_options;

/* One sequence's round, for traces. */
typedef struct {
  int32_t seq, anchor, ndraft, accepted, bonus;
  const int64_t *draft; /* [ndraft] */
} dsp_spec_round;
typedef void (*dsp_round_fn)(void *ctx, const dsp_spec_round *r);

dsp_status dsp_speculate(dsp_target *t, dsp_draft *d, int32_t nseq, const int32_t *const *prompts,
                         const int32_t *lens, const dsp_spec_options *o, dsp_token_fn fn, dsp_round_fn rf, void *ctx,
                         int32_t *finished, dsp_generate_stats *st);

/* ---- a Kimi Delta Attention layer (a Kimi-Linear checkpoint's KDA layer) ----
 * model.layers.N.self_attn.{q,k,v}_proj, {q,k,v}_conv1d, f_a_proj, f_b_proj,
 * dt_bias, A_log, b_proj, g_a_proj, g_b_proj, o_norm, o_proj of a
 * KimiLinearForCausalLM directory (config.json's linear_attn_config names the
 * KDA layers, 1-based). Between the projections and o_proj the layer runs the
 * backend's KDA operation (numerics in src/kernels/cpu/kda.h); heads split over
 * TP ranks (o_proj row-parallel: fp32 partials, all-reduced, rounded once).
 * Each sequence slot keeps its short-conv inputs and recurrent state. What
 * dspark cannot run (another architecture, a full-rank gate, quantized
 * weights, a full-attention layer, heads that TP does not divide) is refused
 * with the field named. CPU and CUDA backends. */
typedef struct dsp_kda_layer dsp_kda_layer;
typedef struct {
  int32_t layer;      /* the decoder layer, 0-based */
  int32_t max_seqs;   /* state slots */
  int32_t max_tokens; /* tokens per call, over all sequences */
  int32_t verify;     /* tokens per sequence a kept (verify) call may bring; 0: no verification */
} dsp_kda_layer_options;
enum { DSP_KDA_CHUNKED = 0, DSP_KDA_RECURRENT = 1 };
typedef struct {
  int32_t nseq;
  const int32_t *slot;  /* [nseq] distinct slots */
  const int32_t *count; /* [nseq] tokens of each sequence (>= 1), in order in x */
  const uint8_t *fresh; /* [nseq] 1: start from zero states; NULL: every sequence continues */
  int form;             /* DSP_KDA_CHUNKED (prefill, chunks of 64) or DSP_KDA_RECURRENT (decode, verify) */
  int keep;             /* recurrent only: keep the states after each token (at most options.verify per
                           sequence), so dsp_kda_layer_accept can roll back to any of them */
} dsp_kda_batch;
typedef struct {
  int64_t hidden, heads, head_dim, conv_width;
  int lower_bound_gate; /* 1: g = lower_bound * sigmoid(...) (linear_attn_config.gate_lower_bound) */
  double lower_bound, eps;
} dsp_kda_layer_info;
dsp_status dsp_kda_layer_load(dsp_backend *be, const char *dir, const dsp_kda_layer_options *o, dsp_kda_layer **out);
/* x, y: [T, hidden] BF16 host views, T = the sum of the counts; y on every rank. */
dsp_status dsp_kda_layer_forward(dsp_kda_layer *L, const dsp_kda_batch *b, const dsp_tensor *x, dsp_tensor *y);
/* After a kept call: the sequence in `slot` continues from its state after the
 * first n (1 .. its count) tokens of that call, as if only they had run
 * (speculative verification's accepted prefix), without running them again. */
dsp_status dsp_kda_layer_accept(dsp_kda_layer *L, int32_t slot, int32_t n);
/* A batch's metadata staged once and read by every KDA layer of a model (each
 * loaded with the options the plan was made with, on its backend): stage a
 * batch, then run each layer on it. A plan holds one batch at a time; staging
 * the next one replaces it. Collective. */
typedef struct dsp_kda_plan dsp_kda_plan;
dsp_status dsp_kda_plan_create(dsp_backend *be, const dsp_kda_layer_options *o, dsp_kda_plan **out);
dsp_status dsp_kda_plan_stage(dsp_kda_plan *p, const dsp_kda_batch *b);
/* dsp_kda_layer_forward over the plan's staged batch (the same results). */
dsp_status dsp_kda_layer_forward_plan(dsp_kda_layer *L, const dsp_kda_plan *p, const dsp_tensor *x, dsp_tensor *y);
void dsp_kda_plan_free(dsp_kda_plan *p);
const dsp_kda_layer_info *dsp_kda_layer_info_of(const dsp_kda_layer *L);
const char *dsp_kda_layer_report(const dsp_kda_layer *L);
void dsp_kda_layer_free(dsp_kda_layer *L);

/* ---- the tokenizer (tokenizer.json: byte-level BPE as Qwen ships it) ------- */
typedef struct dsp_tokenizer dsp_tokenizer;
dsp_status dsp_tokenizer_load(const char *path, dsp_tokenizer **out);
void dsp_tokenizer_free(dsp_tokenizer *t);
int64_t dsp_tokenizer_vocab_size(const dsp_tokenizer *t);
/* ids: cap entries; *n gets the count (DSP_ERR_RANGE with *n set when cap is too small). */
dsp_status dsp_tokenizer_encode(const dsp_tokenizer *t, const char *text, size_t len, int32_t *ids, size_t cap,
                                size_t *n);
/* The bytes of one token (a streamer prints them as they come; a UTF-8
 * character may span tokens). */
dsp_status dsp_tokenizer_token_bytes(const dsp_tokenizer *t, int32_t id, const char **bytes, size_t *len);
/* The text tokenizers' decode gives: the bytes of the tokens (special added
 * tokens left out with skip_special) as UTF-8, each maximal ill-formed
 * subpart replaced by U+FFFD; NUL-terminated, malloc'd (free *text). */
dsp_status dsp_tokenizer_text(const dsp_tokenizer *t, const int32_t *ids, size_t n, int skip_special, char **text,
                              size_t *len);
/* 1 when id is an added token marked special (<|im_end|>, <|endoftext|>...). */
int dsp_tokenizer_is_special(const dsp_tokenizer *t, int32_t id);

#ifdef __cplusplus
}
#endif
#endif /* DSPARK_H */
