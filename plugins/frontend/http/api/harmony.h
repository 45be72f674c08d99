/*
 * harmony.h: gpt-oss's tools block: a request's function tools as the
 * TypeScript namespace that gpt-oss's chat template (openai-gpt-oss-120b.jinja,
 * its render_tool_namespace and render_typescript_type macros) writes into
 * the developer message, byte for byte, including the template's own
 * whitespace (a nested object's members and a oneOf's later variants start
 * a line; checked against jinja2 renders in tests/data/chat/renders.json).
 * Pure: no I/O; unit-tested alone (tests/unit/test_api_toolfmt.c).
 * Not for: the rest of the harmony prompt (core/model/chat_template.c
 * renders the "tools" message this makes) or reading calls back (toolfmt.c).
 */
#ifndef PAGODA_HTTP_API_HARMONY_H
#define PAGODA_HTTP_API_HARMONY_H

#include <jansson.h>

/* "## functions\n\nnamespace functions {\n\n// DESCRIPTION\ntype NAME =
 * (_: {\n...}) => any;\n\n...} // namespace functions" for tools (a list of
 * {"type": "function", "function": {...}}, or the function objects
 * themselves). Where the template would fail (a tool without a
 * description, a non-string enum default) it writes what it can: no
 * description line, the default's JSON text. malloc'd; NULL when out of
 * memory. */
char *harmony_tools_ns(json_t *tools);

#endif /* PAGODA_HTTP_API_HARMONY_H */
