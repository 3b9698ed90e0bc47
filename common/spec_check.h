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
 * 0 when spec may be stored; KC_EINVAL otherwise, with kc_lasterr() naming
 * the field, what is wrong and what to do ("spec: tensors[2] 'y':
 * shape[0] is -4; dimensions must be positive").
 */
int kc_spec_check(const Kclaw__TaskSpec *spec);

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
