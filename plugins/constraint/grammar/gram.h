/*
 * gram.h: what the files of the built-in constraint engine share.
 *
 *   gram_ir.c      the grammar every spec compiles to: rules of
 *                  alternatives of byte-set and rule-reference elements; the
 *                  builder (literals, code point classes as UTF-8 byte
 *                  sequences, bounded and unbounded repetition), limits
 *   gram_check.c   the checks after building (undefined rules, a grammar
 *                  that accepts nothing, left recursion)
 *   gram_gbnf.c    the GBNF-style text syntax (with %json schema rules)
 *   gram_regex.c   regular expressions (whole output, or a JSON string's
 *                  content for a schema's "pattern")
 *   gram_json.c    JSON's shared rules (strings, numbers, any value) and
 *                  integer / number ranges
 *   gram_schema.c  JSON Schema (the documented subset)
 *   gram_dfa.c     the pushdown automaton, determinized lazily: a state is
 *                  a set of parse stacks, interned, with its byte
 *                  transitions filled on first use
 *   gram_mask.c    the vocabulary's token trie and the token mask of a
 *                  state, cached per state
 *   grammar.c      the plugin: ops table, compiled-spec cache, matchers
 *
 * Grammars are over bytes: a text-level class ([a-zé], ".") becomes the
 * UTF-8 byte sequences of its code points, so a token that ends inside a
 * character is judged by its bytes, like every other token.
 *
 * Threads: a g_grammar is built on one thread and read-only afterwards. A
 * g_dfa is mutated by transitions and masks; its owner (grammar.c) holds a
 * lock around every call. Not for: the ABI (pagoda/constraint.h).
 */
#ifndef PAGODA_GRAM_H
#define PAGODA_GRAM_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ------------------------------------------------------------------ IR */

enum { G_END = 0, G_SET = 1, G_RULE = 2 };

typedef struct g_elem {
    int32_t kind; /* G_END, G_SET (arg: byte set id), G_RULE (arg: rule id) */
    int32_t arg;
} g_elem;

typedef struct g_rule {
    char *name;           /* for messages: the GBNF name or where a schema part came from */
    int32_t *alts;        /* start positions in g_grammar.elems; each ends with G_END */
    int32_t n_alts, cap_alts;
    bool defined;         /* a GBNF rule referenced before (or without) its definition */
    bool used;
    /* made by g_rule_repeat (for g_dfa_truncate's horizon): 1, an optional
     * chain rule O_k = item O_{k-1} | "" (rep_a: O_1's id, rep_b: k); 2, the
     * rule item{min} tail (rep_a: min) */
    int8_t rep_kind;
    int32_t rep_a, rep_b;
    int32_t rep_n;        /* rep_kind 1: the chain's length (O_1 .. O_n) */
} g_rule;

typedef struct g_limits {
    int64_t max_elems;    /* elements of the whole grammar (compile work and memory) */
    int32_t max_depth;    /* nesting of a spec's own structure (parentheses, schemas) */
} g_limits;

typedef struct g_grammar {
    g_elem *elems;
    int32_t n_elems, cap_elems;
    uint8_t (*sets)[32];  /* byte sets: bit b of byte b / 8 */
    int32_t n_sets, cap_sets;
    int32_t *set_hash;    /* open addressing over set ids, for interning */
    int32_t cap_set_hash;
    g_rule *rules;
    int32_t n_rules, cap_rules;
    int32_t root;
    g_limits lim;
    /* code point class rules already made (key: the ranges), for reuse */
    struct g_cpmemo *cpmemo;
    int32_t n_cpmemo, cap_cpmemo;
    int32_t anon;         /* counter for generated rule names */
    int32_t *pos_rule;    /* [n_elems] the rule an element belongs to (g_finish), -1 if none */
    int32_t *name_hash;   /* named (GBNF) rules by name, open addressing over rule ids */
    int32_t cap_name_hash, n_named;
    bool failed;          /* sticky: the first error is in err */
    char err[320];
    /* the vocabulary's control tokens that write markup (set before
     * parsing; texts not NUL-terminated): a GBNF reference <text> to one
     * of them reads G_CTL_MARK text G_CTL_MARK, bytes no text spells (0xFF
     * is never in UTF-8), which only that token's second reading gives
     * (grammar.c), so its plain-piece spelling cannot stand there */
    const char *const *ctl_text;
    const uint32_t *ctl_len;
    int32_t n_ctl;
    int32_t n_ctl_refs;   /* such references made */
} g_grammar;

#define G_CTL_MARK 0xFF

/* A sequence under construction (one alternative). */
typedef struct g_seq {
    g_elem *e;
    int32_t n, cap;
} g_seq;

/* A code point range, inclusive. */
typedef struct g_range {
    uint32_t lo, hi;
} g_range;

#define G_MAX_CP 0x10FFFFu

g_grammar *g_new(const g_limits *lim);
void g_free(g_grammar *g);
/* Makes *p (an array of *cap elements of elem bytes) hold at least need,
 * doubling; false (and *p unchanged) when memory runs out or the count
 * passes INT32_MAX. Shared by the grammar's builder and its checks. */
bool g_grow(void **p, int32_t *cap, int32_t need, size_t elem);
/* Records the first error (printf-style); later ones are dropped. Returns -1. */
int g_fail(g_grammar *g, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* A new rule; name is copied (printf-style). -1 when the grammar failed. */
int32_t g_rule_new(g_grammar *g, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The rule named name, created undefined on first use (GBNF references). */
int32_t g_rule_named(g_grammar *g, const char *name, size_t len);
/* Adds seq (then emptied) as an alternative of rule. */
void g_rule_alt(g_grammar *g, int32_t rule, g_seq *seq);

void g_seq_free(g_seq *s);
void g_seq_set(g_grammar *g, g_seq *s, const uint8_t set[32]);
void g_seq_byte(g_grammar *g, g_seq *s, uint8_t b);
void g_seq_lit(g_grammar *g, g_seq *s, const char *bytes, size_t n);
void g_seq_ref(g_grammar *g, g_seq *s, int32_t rule);
void g_seq_append(g_grammar *g, g_seq *dst, const g_seq *src);
/* The code points of ranges[0..n) (sorted or not, may overlap; surrogates
 * never match) as one element: a byte set when all are ASCII, else a rule
 * of their UTF-8 byte sequences (shared between equal classes). */
void g_seq_cpclass(g_grammar *g, g_seq *s, const g_range *ranges, int32_t n);
/* The same code points as they are written inside a JSON string: a
 * character JSON needs escaped (", \, controls) as its one escape
 * (\", \\, \n, \u001f, ...), every other one as itself. */
void g_seq_jsonclass(g_grammar *g, g_seq *s, const g_range *ranges, int32_t n);
/* Rule matching a single literal / a class (convenience). */
int32_t g_rule_lit(g_grammar *g, const char *name, const char *bytes, size_t n);
/* item repeated min..max times (max < 0: unbounded), as a rule. */
int32_t g_rule_repeat(g_grammar *g, int32_t item, int32_t min, int32_t max);
/* A rule of two alternatives a | b given as rules (-1: the empty string). */
int32_t g_rule_opt(g_grammar *g, int32_t item);

/* Normalizes class ranges in place (sort, merge, drop surrogates; r has
 * room for 2n entries); returns the new count, -1 when out of memory.
 * Complement: every code point not in the class (out: n + 1 entries). */
int32_t g_ranges_norm(g_range *r, int32_t n);
int32_t g_ranges_complement(const g_range *r, int32_t n, g_range *out);

/* After building: every referenced rule defined, the root able to finish
 * (alternatives that can never finish are dropped), no left recursion that
 * would grow the stack without reading a byte. 0, or -1 with g->err. */
int g_finish(g_grammar *g);

/* Encodes cp as UTF-8 into out (4 bytes); returns the length. */
int g_utf8_put(uint32_t cp, char *out);

/* ------------------------------------------------------------ frontends */

/* GBNF-style grammar text (root rule "root"). strict: for %json schemas. */
int g_parse_gbnf(g_grammar *g, const char *text, size_t len, bool strict);

/* Regex modes: the whole output, or a JSON string's content (characters
 * written as JSON escapes where JSON needs them; unanchored unless the
 * pattern has ^ / $, as JSON Schema's "pattern" is a search). */
enum { G_RE_WHOLE = 0, G_RE_JSON_STRING = 1 };
/* A rule matching the regex; -1 with g->err. */
int32_t g_regex_rule(g_grammar *g, const char *re, size_t len, int mode, const char *where);

/* A rule for values valid against schema (a JSON Schema, or true/false).
 * root_doc: the document "$ref"s resolve against. -1 with g->err. */
int32_t g_schema_rule(g_grammar *g, json_t *schema, json_t *root_doc, bool strict, const char *where);
/* A rule for any JSON object (json_object). */
int32_t g_json_object_rule(g_grammar *g);

/* The JSON text rules (gram_json.c), made once per grammar on first use;
 * -1 means not made yet. compact: whitespace between tokens is nothing or
 * one space (a schema's output, so its length is bounded by the schema);
 * otherwise also a newline and up to G_JSON_INDENT spaces or tabs (any
 * JSON: json_object). Set before the first rule is made. */
#define G_JSON_INDENT 20
typedef struct g_json {
    g_grammar *g;
    bool compact;
    int32_t ws, jchar, jstr, num, integer, value, object, array;
} g_json;

/* Integer bounds of a number (read from minimum, exclusiveMinimum, ...). */
typedef struct g_bounds {
    bool has_lo, has_hi, lo_excl, hi_excl;
    int64_t lo, hi;
} g_bounds;

void g_json_init(g_json *j, g_grammar *g);
int32_t g_json_ws(g_json *j);
/* Gives rule r the one alternative '"' body '"' (a JSON string whose
 * characters body reads, as written); returns r. */
int32_t g_json_quoted(g_grammar *g, int32_t r, int32_t body);
/* a JSON string of min..max characters (max < 0: any length) */
int32_t g_json_string(g_json *j, int32_t min, int32_t max);
int32_t g_json_integer(g_json *j);
int32_t g_json_number(g_json *j);
int32_t g_json_lit(g_json *j, const char *name, const char *text);
/* Gives rule r the alternative key ws ":" ws val ws (an object member);
 * returns r. s is empty on entry and on return. */
int32_t g_json_member(g_grammar *g, g_seq *s, int32_t r, int32_t key, int32_t ws, int32_t val);
/* The comma list of a JSON object's members or an array's elements, into
 * the rules the caller made (so it keeps their names and order): more ::=
 * "," ws item; list ::= item more* | (empty). Returns list; s is empty on
 * entry and on return. */
int32_t g_json_items(g_grammar *g, g_seq *s, int32_t item, int32_t ws, int32_t more, int32_t list);
/* any JSON value; after it, j->object and j->array are any object / array */
int32_t g_json_value(g_json *j);
/* integers / numbers within b (no exponent), as a rule named from path */
int32_t g_json_integer_range(g_json *j, const g_bounds *b, const char *path);
int32_t g_json_number_range(g_json *j, const g_bounds *b, const char *path);

/* ------------------------------------------------------------ automaton */

typedef struct g_mask g_mask;
typedef struct g_tmask g_tmask;
typedef struct g_need g_need;

/* A stack whose bottom was cut (g_dfa_truncate) rests on G_WILD: popping
 * into it means "some continuation the cut frames decide". */
#define G_WILD (-2)

typedef struct g_state {
    int32_t first, n;      /* the stack tops: state_nodes[first .. first + n) */
    uint32_t hash;
    bool accept;           /* the root has finished: the output may end */
    bool esc;              /* a truncated state's parse popped into G_WILD */
    int32_t trunc;         /* the truncated state of this one, -1 until made */
    int32_t infl, infl_k;  /* g_dfa_inflate's state and bound, -1 until made */
    int32_t infl_pos;      /* when one optional count moved: the frame position it moved
                              to (-1 otherwise), and the items it had left (infl_r) */
    int32_t infl_r;
    g_need *need;          /* an inflated state's tokens' counts (gram_mask.c), or NULL */
    int32_t *next;         /* [classes] -2 unknown, -1 dead, else a state; NULL until used */
    uint8_t *cls;          /* [256] each byte's class (inside next's block): bytes every top
                              reads alike share one transition */
    g_mask *mask;          /* cached token mask, NULL until computed */
    g_tmask *tmask;        /* a truncated state's tokens: certain ones and the
                              subtrees the full state must decide */
    uint32_t used;         /* the mask's last use (d->clock), for eviction */
} g_state;

typedef struct g_node {
    int32_t pos;           /* element position (the stack's top: a G_SET; inner: a return point) */
    int32_t parent;        /* the node below, -1 at the bottom */
} g_node;

typedef struct g_dfa_limits {
    int32_t max_states;    /* states alive in one automaton */
    int32_t max_stacks;    /* stack tops in one state */
    int64_t max_bytes;     /* transitions, nodes and masks together */
    int32_t trunc_depth;   /* frames kept by g_dfa_truncate; 0: no truncated masks */
    int32_t horizon;       /* the longest token in bytes: how far a mask looks ahead */
    bool inflate;          /* share masks along counted repetition (g_dfa_inflate) */
} g_dfa_limits;

typedef struct g_dfa {
    const g_grammar *g;
    g_dfa_limits lim;
    g_node *nodes;
    int32_t n_nodes, cap_nodes;
    int32_t *node_hash;    /* open addressing over node ids */
    int32_t cap_node_hash;
    g_state *states;
    int32_t n_states, cap_states;
    int32_t *state_hash;
    int32_t cap_state_hash;
    int32_t *state_nodes;
    int64_t n_state_nodes, cap_state_nodes;
    int32_t start;
    int64_t bytes;         /* held now (transitions + masks + tables) */
    int64_t mask_bytes;
    uint32_t clock;        /* mask uses, for eviction */
    int64_t trunc_hits;    /* masks made from a cached truncated state */
    /* closure scratch */
    int64_t *visit;        /* (pos, parent) keys seen in this closure, with a stamp */
    uint32_t *visit_stamp;
    int32_t cap_visit;
    uint32_t stamp;
    int64_t *work;
    int32_t cap_work;
    int32_t *out;
    int32_t cap_out;
    char err[256];
} g_dfa;

/* The automaton of a finished grammar; NULL when out of memory. */
g_dfa *g_dfa_new(const g_grammar *g, const g_dfa_limits *lim);
void g_dfa_free(g_dfa *d);
/* The start state, >= 0, or -3 with d->err (a limit). */
int32_t g_dfa_start(g_dfa *d);
/* The state after byte b: >= 0, -1 dead (b not allowed), -3 error. */
int32_t g_dfa_step_slow(g_dfa *d, int32_t s, uint8_t b);
static inline int32_t g_dfa_step(g_dfa *d, int32_t s, uint8_t b)
{
    const g_state *st = &d->states[s];
    if (st->next) {
        int32_t v = st->next[st->cls[b]];
        if (v != -2) return v;
    }
    return g_dfa_step_slow(d, s, b);
}
/* The state of the parses of a and b together (both live), or -3. */
int32_t g_dfa_union(g_dfa *d, int32_t a, int32_t b);
/* Drops cached masks to make room: the least recently used three quarters
 * (all when `all`). */
void g_dfa_drop_masks(g_dfa *d, bool all);
/* The state of s's stacks cut to lim.trunc_depth frames over G_WILD (s
 * itself when none is that deep), or -3. Counted repetition is cut at the
 * horizon too: "k more items may come" for k beyond the longest token is
 * written as "horizon + 1 more", since no token can tell them apart. A token the truncated state
 * reads without popping into G_WILD is valid in s whatever the cut frames
 * hold, so its masks are shared by every state that looks the same near
 * the top: the items of an array, the values of one schema in many places. */
int32_t g_dfa_truncate(g_dfa *d, int32_t s);

/* The state of s with its counted-repetition frames moved to the largest
 * count the mask can tell apart ("k more items may come", k up to the
 * horizon, becomes the chain's longest such count), or s itself when no
 * frame moves; -3 on error. *k: the longest token (bytes) for which both
 * states allow the same tokens and make the same escape roots: a token of
 * L bytes starts at most L items, so frames with more than L items left
 * read it alike. So a maxLength string's every remaining length takes its
 * short tokens from one shared mask, and only tokens longer than *k are
 * walked from the state itself (gram_mask.c). Frames whose bound would be
 * below 2 are left where they are. Cached in the state. */
int32_t g_dfa_inflate(g_dfa *d, int32_t s, int32_t *k);

/* State s's parses in two states: *in, those inside the counted chain
 * whose frames sit at position target (an O_c frame of g_dfa_inflate) over
 * one of parents, with *started: the items they started since O_c; *ex,
 * the others (which left the chain, or never were in it), with s's accept
 * and escape flags. -1 for an empty side. Returns 0; -1 when the parses
 * inside are at more than one count; -3 on error. */
int g_dfa_split(g_dfa *d, int32_t s, int32_t target, const int32_t *parents, int32_t n_parents, int32_t *in,
                int32_t *ex, int32_t *started);

/* ------------------------------------------------------------ token masks */

#define G_SHORT_MAX 32

typedef struct g_trie {
    int32_t n_vocab;
    int32_t n_nodes;
    uint8_t *byte;         /* [n_nodes] the byte into node i (preorder) */
    uint16_t *depth;       /* [n_nodes] >= 1 */
    int32_t *skip;         /* [n_nodes] the node after i's subtree */
    int32_t *parent;       /* [n_nodes] the node above i, -1 under the root */
    int32_t *tok_first;    /* [n_nodes + 1] tokens ending at i: tok_ids[tok_first[i] ..) */
    int32_t *tok_ids;
    int32_t max_depth;
    uint16_t *maxlen;      /* [n_nodes] the longest token in i's subtree (bytes) */
    int32_t *by_len;       /* the tokens that write text, longest first */
    int32_t n_by_len;
    uint32_t *short_bits;  /* [G_SHORT_MAX][words] the tokens of at most K bytes, as masks */
    char **tok_bytes;      /* [n_vocab] copies, for advance() */
    uint32_t *tok_len;
} g_trie;

/* Build from the vocabulary (bytes[t][0..len[t])); NULL when out of memory. */
g_trie *g_trie_new(int32_t n_vocab, const char *const *bytes, const uint32_t *len);
void g_trie_free(g_trie *t);

/* The mask of state s into out ((n_vocab + 31) / 32 words), from the
 * state's cache or by walking the trie (then cached, in the smaller of a
 * bit set, an id list or an excluded-id list). *hit tells which. 0, or -1
 * with d->err. */
int g_mask_fill(g_dfa *d, const g_trie *t, int32_t s, uint32_t *out, bool *hit);
/* The same without any cache: the reference the tests compare with. */
int g_mask_fill_uncached(g_dfa *d, const g_trie *t, int32_t s, uint32_t *out);
void g_mask_free(g_mask *m);
size_t g_mask_bytes(const g_mask *m);
void g_tmask_free(g_tmask *m);
size_t g_tmask_bytes(const g_tmask *m);

/* An inflated state B's tokens with the number of items each needs to
 * start in B's moved count (g_dfa_inflate): a state that had r items left
 * there allows exactly the tokens of need <= r (a parse of it from B that
 * starts at most r items is one from the state, and the other way round),
 * and keeps the escape roots of need <= r. Found by one more walk of B in
 * which each node's parses are kept in groups of one count: those still in
 * the chain (their count is in their frames) and those that left it (the
 * count they left with). Not possible (ok false) when one group's parses
 * are at two counts, more than G_MAX_GROUPS groups meet, or a node where
 * only escaped parses are cheapest would be an escape root for some r but
 * not for B (those need more than a filter). */
struct g_need {
    int32_t pos;           /* the moved frames' position in B */
    int32_t n_vocab;
    bool roots;            /* made with escape roots (a truncated state's walk) */
    bool ok;
    int32_t n_roots;
    uint8_t *tok;          /* [n_vocab] items needed, 255: never */
    int32_t *root_node;    /* the escape roots, as the walk meets them */
    uint8_t *root_need;
};

void g_need_free(g_need *m);
size_t g_need_bytes(const g_need *m);
/* The counts of B's tokens for the moved position pos (gram_mask_count.c).
 * NULL on error (d->err); a g_need with ok false when counts cannot be used. */
g_need *g_need_walk(g_dfa *d, const g_trie *t, int32_t B, int32_t pos, bool with_roots);

#endif /* PAGODA_GRAM_H */
