/*
 * sandbox.h - the pieces of gpu-sandbox (DESIGN.md "The reviewer").
 *
 * Two processes: the parent (kclaw-sandbox) owns the NNG endpoint, never
 * touches CUDA, and supervises a child (kclaw-sandbox-child) that owns the
 * CUDA context. They speak over two pipes in frames: a 4-byte little-endian
 * length, then a protobuf message. The child's first frame is an EvalResult
 * with an empty job_id (the "ready" frame: device name and arch, status OK
 * or NO_DEVICE); after it, each EvalRequest the parent writes is answered
 * by one EvalResult. A child that hits a kernel fault answers, then exits.
 *
 * The child's GPU work goes through a backend (a function table), so a test
 * can run a scripted child that crashes or hangs on command.
 */
#ifndef SBX_SANDBOX_H
#define SBX_SANDBOX_H

#include <stddef.h>
#include <stdint.h>

#include "kclaw.pb-c.h"

/* The file descriptors the child reads requests from and writes results to. */
#define SBX_CHILD_IN_FD 3
#define SBX_CHILD_OUT_FD 4
/* Frames larger than this are refused (tensors never travel in frames
 * except small inline ones). */
#define SBX_FRAME_MAX (256u << 20)

/* ---- frames ---- */

/* Writes one message as a frame; KC_ECLOSED when the peer is gone. */
int sbx_frame_write(int fd, const ProtobufCMessage *m);
/*
 * Reads one frame within timeout_ms (-1: forever). On success *buf is
 * malloc'd (caller frees). KC_ECLOSED on end of file, KC_ETIMEDOUT when
 * nothing complete arrived in time.
 */
int sbx_frame_read(int fd, int timeout_ms, void **buf, size_t *len);

/* ---- results ---- */

/*
 * A new EvalResult whose every member will be malloc'd, so that
 * kclaw__eval_result__free_unpacked(r, NULL) frees it.
 */
Kclaw__EvalResult *sbx_result_new(const char *job_id);
/* Sets a string member (frees the old one); fmt is printf-like. */
void sbx_result_set(char **field, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Sets status and message (printf-like). */
void sbx_result_status(Kclaw__EvalResult *r, Kclaw__EvalStatus status,
    const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void sbx_result_add_metric(
    Kclaw__EvalResult *r, const char *name, double value, const char *unit);
const char *sbx_status_name(Kclaw__EvalStatus s);

/* ---- the child and its backend seam ---- */

typedef struct {
	int device;
	const char *cache_dir; /* compile cache; may be NULL */
	const char *arch;      /* --arch override, or NULL */
	/* --alone: no other child of its sandbox runs (not a spare started
	 * beside a busy one), so the device may be measured at start. */
	int alone;
} sbx_child_config;

typedef struct sbx_backend {
	const char *name;
	/*
	 * Prepares the device. Fills ready's device_name and arch. Returns 0,
	 * or KC_ENODEV when there is no usable GPU (the child then stays up
	 * and answers NO_DEVICE, or compiles for compile-only requests).
	 */
	int (*init)(void **state, const sbx_child_config *cfg,
	    Kclaw__EvalResult *ready);
	/*
	 * Evaluates req into res (status, message, everything it can). Sets
	 * *fatal when the CUDA context is lost: the child sends res and
	 * exits, and the parent starts a fresh one.
	 */
	void (*evaluate)(void *state, const Kclaw__EvalRequest *req,
	    Kclaw__EvalResult *res, int *fatal);
	/*
	 * Optional (NULL: none). Compiles sources[0..n), the candidate
	 * sources of one request's configurations (a tunable sweep), ahead of
	 * their evaluations and in parallel, into the compile cache, so that
	 * each evaluation finds its compile there. It only warms the cache:
	 * a source that does not compile is reported by its own evaluation.
	 * Returns how many compiled, or -1 when it did nothing (no cache
	 * folder, no architecture); *threads gets the threads it used.
	 */
	int (*precompile)(void *state, const Kclaw__EvalRequest *req,
	    const char *const *sources, size_t n, unsigned *threads);
	/*
	 * Optional (NULL: nothing to measure). Measures the device as the
	 * first evaluation would (the ceilings, the events' cost), for a
	 * request with measure_device: the parent sends it to a spare while
	 * no other child runs anything. res says what was done.
	 */
	void (*measure)(void *state, Kclaw__EvalResult *res);
	void (*fini)(void *state);
} sbx_backend;

/* The real backend: NVRTC, the driver API, CUPTI, cuBLASLt. */
extern const sbx_backend sbx_cuda_backend;

/*
 * The child's main loop over fds SBX_CHILD_IN_FD/SBX_CHILD_OUT_FD with
 * backend be. Parses --device N, --cache DIR, --arch sm_XX. Returns the
 * process exit code.
 */
int sbx_child_main(const sbx_backend *be, int argc, char **argv);

/* ---- the parent's supervision of one child ---- */

typedef struct sbx_super sbx_super;

typedef struct {
	const char *child_path; /* the child executable */
	int device;
	const char *cache_dir;
	const char *arch;
	int ready_timeout_ms; /* child start-up limit (default 60000) */
	int no_spare;         /* no spare child (also KCLAW_SANDBOX_SPARE=0) */
} sbx_super_config;

int sbx_super_open(sbx_super **out, const sbx_super_config *cfg);
/*
 * Runs one evaluation in the child within timeout_ms, starting a child
 * first if none is running. Always produces a result (never NULL on 0):
 * the child's own, or RUNTIME_FAULT when it died, TIMEOUT when it was
 * killed at the deadline, INTERNAL_ERROR when no child could start. A
 * child that died or was killed is replaced at once, so the next request
 * finds one ready. Free *res with kclaw__eval_result__free_unpacked.
 */
int sbx_super_eval(sbx_super *s, const Kclaw__EvalRequest *req, int timeout_ms,
    Kclaw__EvalResult **res);
/*
 * Makes fd the evaluation's abort switch: when it becomes readable while a
 * request is in the child, the child is killed and the result is CANCELLED
 * (a task cancelled or a shutdown announced by the orchestrator). The
 * caller drains fd; -1 turns it off.
 */
void sbx_super_set_cancel_fd(sbx_super *s, int fd);
/* The latest ready frame's device name and arch ("" before the first). */
const char *sbx_super_device_name(const sbx_super *s);
/* Number of children started so far (1 after the first start). */
unsigned sbx_super_starts(const sbx_super *s);
void sbx_super_close(sbx_super *s);

/* The helper kernels' CUDA source (helpers_cu.c). */
extern const char sbx_helpers_cu[];

#endif
