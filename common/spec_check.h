/*
 * spec_check.h - the server's check of a TaskSpec it did not load itself.
 *
 * kclawd accepts a spec over the API from any client with the token, not
 * only from `kclaw submit` (whose bundle loader checks its JSON). Every
 * field the orchestrator, the agents or the sandbox later size, index or
 * turn into a name is checked here with the bundle loader's rules: names,
 * kinds, dtypes, shapes (positive, at most KC_SPEC_MAX_DIMS dimensions,
 * element counts and bytes computed with overflow checks), counts,
 * tolerances, budgets and the reference. Paths are the caller's business
 * (orch_spec_paths_check).
 */
#ifndef KC_SPEC_CHECK_H
#define KC_SPEC_CHECK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kclaw.pb-c.h"

#define KC_SPEC_MAX_TENSORS 1024
#define KC_SPEC_MAX_DIMS 8
#define KC_SPEC_MAX_SETS 64
#define KC_SPEC_MAX_ELEMS (1ull << 40)       /* per tensor */
#define KC_SPEC_MAX_TOTAL_BYTES (1ull << 37) /* all tensors: 128 GiB */
#define KC_SPEC_MAX_TEXT (4u << 20)          /* description, context, sources */

/*
 * The bounds of the numbers a task gives (task.json and a spec sent to
 * Submit alike; kclaw.json's "orchestrator" has the same ones). Each
 * keeps what the orchestrator computes from it in range: a timeout in
 * seconds times 1000 in 32 bits, a deadline in ms in 64.
 */
#define KC_SPEC_MAX_SEEDS 64u
#define KC_SPEC_MAX_CANDIDATES_PER_ROUND                                       \
	8u /* the state machine runs at most 8 at once */
#define KC_SPEC_MAX_ROUNDS 100000u
#define KC_SPEC_MAX_TRIALS 1000u
#define KC_SPEC_MAX_REPAIRS 1000u
#define KC_SPEC_MAX_JOB_RETRIES 100u
#define KC_SPEC_MAX_DUPLICATES 1000u
#define KC_SPEC_MAX_TIMEOUT_S 86400u /* agent and eval timeouts: a day */
#define KC_SPEC_MAX_TOKENS 1e15
#define KC_SPEC_MAX_WALL_S 1e9
#define KC_SPEC_MAX_SPEEDUP 1e6
#define KC_SPEC_MAX_RT 100.0
#define KC_SPEC_MAX_AT 1e6
#define KC_SPEC_MAX_LABEL 256 /* source_name, a candidate's id, origin */

/*
 * 0 when spec may be stored; KC_EINVAL otherwise, with kc_lasterr() naming
 * the field, what is wrong and what to do ("spec: tensors[2] 'y':
 * shape[0] is -4; dimensions must be positive").
 */
int kc_spec_check(const Kclaw__TaskSpec *spec);

/*
 * Whether s (n bytes) is valid UTF-8: no overlong forms, surrogates or
 * code points past U+10FFFF. When it is not, *bad (may be NULL) is the
 * offset of the first byte that is wrong.
 */
bool kc_utf8_valid(const char *s, size_t n, size_t *bad);

/*
 * The bytes of a tensor of dtype and shape, with overflow checks: 0 and
 * *bytes set, or KC_EINVAL (a dimension below 1, more than
 * KC_SPEC_MAX_ELEMS elements, an unknown dtype).
 */
int kc_spec_tensor_bytes(
    Kclaw__DType dtype, const int64_t *shape, size_t ndim, uint64_t *bytes);

/*
 * The relative change between input sets below which a tolerance cannot
 * tell an output from a constant: the larger of rtol and max_rel_norm,
 * 1e-5 without either (tol may be NULL). Outputs that vary less are
 * degenerate (the sandbox's verdict, the orchestrator's reference check).
 */
double kc_tolerance_admits(const Kclaw__Tolerance *tol);

/*
 * Appends output name's variation rule figures to r->output_variations:
 * how much it changes between two input sets of one distribution
 * (measured 0: not measured, variation ignored), what tol admits
 * (kc_tolerance_admits) and whether it is degenerate (it varies less).
 * The sandbox and the test doubles report with it. Out of memory:
 * nothing is appended.
 */
void kc_result_add_variation(Kclaw__EvalResult *r, const char *name,
    int measured, double variation, const Kclaw__Tolerance *tol);

#endif
