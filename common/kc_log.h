/*
 * kc_log.h - one-line logs to stderr: time, process name, level, message.
 * Safe from any thread. Secrets (API keys) must never be passed in.
 */
#ifndef KC_LOG_H
#define KC_LOG_H

enum kc_log_level { KC_LOG_DEBUG, KC_LOG_INFO, KC_LOG_WARN, KC_LOG_ERROR };

/* Names the process in every line ("kclawd", "agent-planner-2"). */
void kc_log_init(const char *name);
/* From the environment variable KCLAW_LOG (debug, info, warn, error). */
void kc_log_set_level(enum kc_log_level level);
void kc_log(enum kc_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#define KC_DEBUG(...) kc_log(KC_LOG_DEBUG, __VA_ARGS__)
#define KC_INFO(...) kc_log(KC_LOG_INFO, __VA_ARGS__)
#define KC_WARN(...) kc_log(KC_LOG_WARN, __VA_ARGS__)
#define KC_ERROR(...) kc_log(KC_LOG_ERROR, __VA_ARGS__)

#endif
