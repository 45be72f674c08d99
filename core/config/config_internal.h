/*
 * core/config_internal.h: what config.c uses from config_value.c beyond
 * the public config.h: the value check with the [engine]-only extras.
 * Not for: anything outside core/config*.c.
 */
#ifndef PAGODA_CORE_CONFIG_INTERNAL_H
#define PAGODA_CORE_CONFIG_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>

#include "config.h"

/* pagoda_config_check_value, plus what only [engine] keys have: choices
 * ("a|b|c") for an enumerated string key, and auto_ok for a size key that
 * also takes "auto". Returns 0, or -1 with what is allowed in why. */
int pagoda_config_check_value_ex(const pagoda_config_key *k, const char *choices, bool auto_ok,
                                 const char *v, char *why, size_t n);

#endif /* PAGODA_CORE_CONFIG_INTERNAL_H */
