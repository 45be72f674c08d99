/*
 * callmemo.h: the text the model wrote for its recent Hermes tool calls,
 * so that the next turn's prompt shows each call exactly as it was
 * generated and its KV (still in the prefix cache) is reused.
 *
 * A call goes out to the client as a name and an arguments JSON, and
 * comes back in the history as JSON the client serialized again: the
 * prompt writes it the canonical way (hermes_call_body, json_dumps with
 * ", " and ": ", keys in their order), while the model, held by the
 * constraint, may have written other spacing ({ "city": "Paris" }). The
 * memo maps the canonical body of a call to the body the model wrote; the
 * two parse to the same call (the key is made from the written one), so
 * the substitution never changes what the prompt says, only its spacing.
 * Bounded: CALLMEMO_SIZE entries, the oldest replaced first; a call that
 * was written canonically is not stored. [any thread] (one mutex).
 * Not for: other families' syntax (their calls are rendered as before),
 * the token ids (the engine realigns them, core/engine/engine_realign.c).
 */
#ifndef PAGODA_HTTP_API_CALLMEMO_H
#define PAGODA_HTTP_API_CALLMEMO_H

#include <stddef.h>

#define CALLMEMO_SIZE 256       /* calls remembered */
#define CALLMEMO_MAX_BODY 4096  /* a longer call is not remembered */

/* The body a Hermes call is written with between <tool_call> and
 * </tool_call> in a prompt: "\n" {"name": N, "arguments": A} "\n", A the
 * arguments JSON text (text that is no JSON: the body "\n{}\n").
 * malloc'd; NULL when out of memory. */
char *hermes_call_body(const char *name, const char *args);

/* A call block's body as the model wrote it (the n bytes between the
 * tags); remembered when it parses as a call and differs from its
 * canonical body. */
void callmemo_note(const char *body, size_t n);

/* The body the model wrote for the call whose canonical body is
 * canonical (malloc'd), or NULL when none is remembered. */
char *callmemo_written(const char *canonical);

/* Forget every call (tests). */
void callmemo_clear(void);

#endif
