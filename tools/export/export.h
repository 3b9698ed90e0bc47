/*
 * export.h - `kclaw result ID --out DIR`: the best kernel as files a user
 * can take away (docs/cli.md "kclaw result --out").
 *
 * DIR receives kernel.cu and plan.json (a candidate folder `kclaw eval`
 * accepts), result.json (the best kernel's measurements and for which
 * tensors it was verified), history.json (every candidate), a standalone
 * C launcher (launcher.h, launcher.c, main.c: NVRTC + the CUDA driver API
 * + cuBLASLt for matmul steps) and a PyTorch module (model_new.py:
 * ModelNew through ctypes, libcuda and libnvrtc), and README.md saying how
 * to build and use each.
 */
#ifndef KC_EXPORT_H
#define KC_EXPORT_H

#include "kclaw.pb-c.h"

/* Writes every file above into dir (created if missing). r->best must be
 * set. Returns 0 or a KC_E* code with kc_lasterr() saying what failed. */
int kc_export_result(const char *dir, const Kclaw__ResultResponse *r);

#endif
