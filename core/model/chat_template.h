/*
 * chat_template.h: turns a list of chat messages into prompt text for the
 * common template families, recognised from the GGUF's
 * `tokenizer.chat_template` by marker substrings (no Jinja engine), or
 * forced by name (`engine.chat_template = auto|chatml|llama2|llama3|
 * mistral|zephyr|gemma|qwen3|chatml-think|qwen3-coder|qwen3.5|glm4|deepseek3|deepseek-r1|
 * deepseek-v3.1|kimi-k2|harmony`). Also names the stop strings each family implies.
 * Not for: tokenizing (the engine tokenizes the rendered text with
 * parse_special = true, add_special = false), tool calls, or templates
 * outside these families (they fall back to ChatML with a warning).
 *
 * Renderings (S system, U user, A assistant; "+gen" is the generation
 * prompt appended when add_generation_prompt):
 *   chatml   <|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n
 *            ...  +gen <|im_start|>assistant\n             (roles as given)
 *   llama2   <s>[INST] <<SYS>>\nS\n<</SYS>>\n\nU [/INST] A </s><s>[INST] U [/INST]
 *            (contents stripped; no generation prompt: the turn ends in [/INST])
 *   llama3   <|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nS<|eot_id|>
 *            ... +gen <|start_header_id|>assistant<|end_header_id|>\n\n
 *            (contents trimmed, as Meta's template does)
 *   mistral  <s>[INST] S\n\nU [/INST]A</s>[INST] U [/INST]
 *            (v0.1/v0.2 style; the system text is folded into the next user turn;
 *            a tool result, which these templates have no role for, is a user turn)
 *   zephyr   <|system|>\nS</s>\n<|user|>\nU</s>\n<|assistant|>\nA</s>\n +gen <|assistant|>\n
 *   gemma    <bos><start_of_turn>user\nS\n\nU<end_of_turn>\n<start_of_turn>model\nA<end_of_turn>\n
 *            +gen <start_of_turn>model\n  (system folded into the first user
 *            turn, assistant named model, contents trimmed)
 *   qwen3    Qwen3's template: ChatML, but a run of tool results is one user
 *            turn, each \n<tool_response>\nR\n</tool_response>, and with
 *            the last query the last user message whose text is not a
 *            wrapped <tool_response>...</tool_response>, an assistant turn
 *            before it keeps only the text after its last </think> (leading
 *            newlines stripped), one after it opens with its reasoning,
 *            <think>\nR\n</think>\n\n, when it has some or is the last
 *            message (R empty then); +gen <|im_start|>assistant\n (thinking
 *            on, the template's enable_thinking default; thinking off adds
 *            <think>\n\n</think>\n\n) (recognised by <|im_start|>, <think>
 *            and reasoning_content)
 *   chatml-think QwQ-32B's template: qwen3's tool results; every assistant
 *            turn but the last keeps only its text after </think>; +gen
 *            <|im_start|>assistant\n<think>\n (thinking on, the model's
 *            own template; off closes it with </think>) (recognised by
 *            <|im_start|> and <think> without reasoning_content)
 *   qwen3-coder ChatML, but a tool result is a user turn: <|im_start|>user\n
 *            <tool_response>\nR\n</tool_response>\n<|im_end|>\n, a run of
 *            results one turn, an earlier assistant turn's reasoning dropped
 *            as qwen3's (recognised by the template's <function= and
 *            <parameter=, how Qwen3-Coder writes a call, and no <think>)
 *   qwen3.5  qwen3-coder's calls and results, and it thinks: an assistant
 *            turn after the last user message opens with its reasoning,
 *            <think>\nR\n</think>\n\n (R empty when it has none), one before
 *            it keeps its answer only; +gen <|im_start|>assistant\n<think>\n
 *            (thinking off: <think>\n\n</think>\n\n) (recognised as
 *            qwen3-coder's markers and <think>)
 *   glm4     [gMASK]<sop><|system|>\nS<|user|>\nU<|assistant|>\n<think></think>\nA
 *            ... +gen <|assistant|> (GLM-4.5/4.6: an assistant turn after the
 *            last user message keeps its reasoning inside <think></think>,
 *            stripped; the answer is stripped and omitted when empty; tool
 *            results <|observation|>\n<tool_response>\nR\n</tool_response>,
 *            one <|observation|> for a run of them; thinking off: /nothink
 *            after each user text not ending with it, +gen
 *            <|assistant|>\n<think></think>)
 *   deepseek3 <｜begin▁of▁sentence｜>S<｜User｜>U<｜Assistant｜>A<｜end▁of▁sentence｜>
 *            ... +gen <｜Assistant｜> (system texts joined by a blank line;
 *            tool results in <｜tool▁outputs▁begin｜>...<｜tool▁outputs▁end｜>)
 *   deepseek-r1 as deepseek3, but the last system text only, an earlier
 *            assistant turn's text after its last </think>, +gen
 *            <｜Assistant｜><think>\n (thinking off: <think>\n</think>)
 *   deepseek-v3.1 as deepseek3's system and user turns, but an assistant turn
 *            after a user message opens <｜Assistant｜><think></think>, one
 *            after a tool result has no marker, a turn's text is what follows
 *            its first </think> (a turn with calls as given), results are
 *            <｜tool▁output▁begin｜>R<｜tool▁output▁end｜> one after another,
 *            and +gen (after a user message only) <｜Assistant｜><think></think>
 *            (thinking on: <think>; V3.1's default is off) (recognised by
 *            <｜Assistant｜><think></think> and <｜tool▁sep｜> in the template,
 *            without V3.2's ｜DSML｜ markup)
 *   kimi-k2  <|im_system|>system<|im_middle|>S<|im_end|><|im_user|>user<|im_middle|>U
 *            <|im_end|><|im_assistant|>assistant<|im_middle|>A<|im_end|> +gen
 *            <|im_assistant|>assistant<|im_middle|> (Kimi's default system
 *            turn when the first message is not one)
 *   harmony  gpt-oss: <|start|>system<|message|>identity, cutoff, date,
 *            Reasoning: EFFORT, channels<|end|><|start|>developer<|message|>
 *            # Instructions\n\nS\n\n<|end|><|start|>user<|message|>U<|end|>
 *            <|start|>assistant<|channel|>final<|message|>A<|end|> +gen
 *            <|start|>assistant (earlier analysis dropped; markup in an
 *            assistant turn is refused)
 * kimi-k2 renders a tool result as a system turn named tool (its content
 * begins "## Return of ID\n", as the caller writes it). harmony takes a
 * call as role "assistant to=functions.NAME" with the arguments as content
 * (<|start|>assistant to=functions.NAME<|channel|>commentary json<|message|>
 * ARGS<|call|>) and a result as role "functions.NAME" (<|start|>functions.NAME
 * to=assistant<|channel|>commentary<|message|>"JSON string"<|end|>); a bare
 * "tool" role is refused there (PAGODA_ERR_UNSUPPORTED). Two more harmony
 * roles the HTTP frontend writes: "tools", whose content is the tools
 * namespace ("## functions\n\nnamespace functions {...}", wherever it
 * stands: the developer message gets "# Tools\n\n" and it, the system
 * message the line "Calls to these tools must go to the commentary
 * channel: 'functions'."), and "analysis", an assistant's text beside its
 * calls (<|start|>assistant<|channel|>analysis<|message|>TEXT<|end|>).
 * And "assistant written", a call as the model wrote it (the frontend's
 * call memo): its content is the message after <|start|>assistant, header
 * and arguments (<|channel|>commentary to=functions.NAME <|constrain|>json
 * <|message|>ARGS), rendered <|start|>assistant CONTENT<|call|>, so the
 * next turn's prompt holds the tokens the model generated (the frontend
 * refuses the role in a client's message).
 * BOS: the families whose templates begin with {{ bos_token }} (llama2 at
 * every user turn, llama3, mistral, gemma) include its text, since the
 * engine tokenizes chat prompts with add_special = false. bos_text/eos_text
 * NULL means the family's usual text ("<s>", "<|begin_of_text|>", "<bos>",
 * "</s>"); "" means none. ChatML never adds a BOS (Qwen, SmolLM do not).
 *
 * Default system prompts (SmolLM2, Qwen2) are not injected by render; a
 * caller that wants the template's behaviour asks
 * pagoda_chat_default_system() and prepends a system message when the
 * conversation has none.
 *
 * Threads: every function is pure [any thread].
 */
#ifndef PAGODA_CHAT_TEMPLATE_H
#define PAGODA_CHAT_TEMPLATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pagoda/host.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum pagoda_chat_family {
    PAGODA_CHAT_CHATML,
    PAGODA_CHAT_LLAMA2,
    PAGODA_CHAT_LLAMA3,
    PAGODA_CHAT_MISTRAL,
    PAGODA_CHAT_ZEPHYR,
    PAGODA_CHAT_GEMMA,
    PAGODA_CHAT_QWEN3,
    PAGODA_CHAT_GLM4,
    PAGODA_CHAT_DEEPSEEK3,
    PAGODA_CHAT_DEEPSEEK_R1,
    PAGODA_CHAT_KIMI_K2,
    PAGODA_CHAT_HARMONY,
    PAGODA_CHAT_QWEN3_CODER,
    PAGODA_CHAT_QWEN35,
    PAGODA_CHAT_DEEPSEEK31,
    PAGODA_CHAT_CHATML_THINK,
    PAGODA_CHAT_UNKNOWN
} pagoda_chat_family;

/* The family a Jinja template belongs to, by its marker substrings.
 * NULL, empty or unrecognised -> PAGODA_CHAT_UNKNOWN. */
pagoda_chat_family pagoda_chat_detect(const char *jinja_template);

/* A family's name above ("chatml", "qwen3", "chatml-think", "glm4", ...) -> *out and
 * PAGODA_OK; anything else (including "auto", NULL) -> PAGODA_ERR_INVALID. */
int pagoda_chat_family_from_name(const char *name, pagoda_chat_family *out);

/* The name above, or "unknown"; never NULL, static storage. */
const char *pagoda_chat_family_name(pagoda_chat_family f);

/* The family to use from the config value (NULL, "" or "auto": detect from
 * the template) and the model's template (may be NULL). Falls back to
 * ChatML when detection fails, writing a one-line warning into msg (msg[0]
 * is 0 when there is nothing to say). PAGODA_ERR_INVALID with the message
 * in msg for an unknown name. */
int pagoda_chat_select(const char *config_value, const char *jinja_template,
                       pagoda_chat_family *out, char *msg, size_t msg_len);

/* Renders n messages (role and content; a NULL content is empty) in the
 * family's format (UNKNOWN renders as ChatML), appending the assistant
 * turn's opening when add_generation_prompt. On PAGODA_OK *out is a
 * malloc'd NUL-terminated string the caller frees. Errors: NULL arguments,
 * n < 0, a message without a role (PAGODA_ERR_INVALID), out of memory. */
int pagoda_chat_render(pagoda_chat_family f, const pagoda_chat_message *msgs, int32_t n,
                       bool add_generation_prompt, const char *bos_text, const char *eos_text,
                       char **out, char *err, size_t err_len);

/* What a request passes to the template beside the messages (Jinja's
 * chat_template_kwargs). A NULL opts is all defaults. */
typedef struct pagoda_chat_opts {
    int enable_thinking;          /* -1 the template's default, 0 off, 1 on (qwen3, qwen3.5, glm4,
                                   * chatml-think, deepseek-r1, deepseek-v3.1, whose default is off) */
    const char *reasoning_effort; /* harmony: "low", "medium" or "high"; NULL or "": a
                                   * "Reasoning: X" line of the system message, else medium */
    const char *date;             /* harmony's "Current date:" (YYYY-MM-DD); NULL: today, UTC */
} pagoda_chat_opts;

/* pagoda_chat_render with opts (may be NULL). A reasoning_effort other
 * than low/medium/high is PAGODA_ERR_INVALID naming it; a "tool" message
 * in harmony PAGODA_ERR_UNSUPPORTED. */
int pagoda_chat_render_opts(pagoda_chat_family f, const pagoda_chat_message *msgs, int32_t n,
                            bool add_generation_prompt, const char *bos_text, const char *eos_text,
                            const pagoda_chat_opts *opts, char **out, char *err, size_t err_len);

/* NULL-terminated list of stop strings the family implies (static storage):
 * chatml/qwen3/chatml-think/unknown "<|im_end|>", llama3 "<|eot_id|>", gemma "<end_of_turn>",
 * llama2/mistral/zephyr "</s>", glm4 "<|user|>", "<|observation|>", "<|endoftext|>",
 * deepseek3/deepseek-r1 "<｜end▁of▁sentence｜>", kimi-k2 "<|im_end|>", harmony
 * "<|return|>", "<|call|>" (not <|end|>, which ends a channel's message). */
const char *const *pagoda_chat_stop_strings(pagoda_chat_family f);

/* The default system prompt a ChatML template writes when the conversation
 * has none (SmolLM2: "You are a helpful AI assistant named SmolLM, trained
 * by Hugging Face"), recognised as a literal "<|im_start|>system\n...
 * <|im_end|>" inside one Jinja string. Returns true and copies it
 * (truncated to buf_len - 1 bytes) into buf; false when there is none. */
bool pagoda_chat_default_system(const char *jinja_template, char *buf, size_t buf_len);

#ifdef __cplusplus
}
#endif
#endif /* PAGODA_CHAT_TEMPLATE_H */
