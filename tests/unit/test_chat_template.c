/* test_chat_template.c: chat template detection and rendering
 * (core/chat_template.c): exact strings for every family, detection from
 * realistic Jinja excerpts, names, stop strings, default system prompts. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "chat_template.h"
#include "pagoda/types.h"
#include "testutil.h"

static const pagoda_chat_message conv[] = {
    {"system", "You are terse."},
    {"user", "Hi"},
    {"assistant", "Hello!"},
    {"user", "2+2?"},
};

static void expect_render(pagoda_chat_family f, const pagoda_chat_message *m, int32_t n, bool gen,
                          const char *bos, const char *eos, const char *want)
{
    char *out = NULL, err[256] = "";
    ck_assert_int_eq(pagoda_chat_render(f, m, n, gen, bos, eos, &out, err, sizeof err), PAGODA_OK);
    ck_assert_ptr_nonnull(out);
    ck_assert_str_eq(out, want);
    free(out);
}

START_TEST(render_chatml)
{
    expect_render(PAGODA_CHAT_CHATML, conv, 4, true, NULL, NULL,
                  "<|im_start|>system\nYou are terse.<|im_end|>\n"
                  "<|im_start|>user\nHi<|im_end|>\n"
                  "<|im_start|>assistant\nHello!<|im_end|>\n"
                  "<|im_start|>user\n2+2?<|im_end|>\n"
                  "<|im_start|>assistant\n");
    /* no generation prompt; a BOS text is never added for ChatML */
    expect_render(PAGODA_CHAT_CHATML, conv + 1, 1, false, "<s>", NULL,
                  "<|im_start|>user\nHi<|im_end|>\n");
    /* UNKNOWN renders as ChatML */
    expect_render(PAGODA_CHAT_UNKNOWN, conv + 1, 1, true, NULL, NULL,
                  "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
}
END_TEST

/* A thinking conversation: the first answer's reasoning is dropped (it is
 * before the last user message), the last one (after it) kept. */
static const pagoda_chat_message think_conv[] = {
    {"system", "Be brief."},
    {"user", "Hi"},
    {"assistant", "<think>\nThey greet.\n</think>\n\nHello!"},
    {"user", "2+2?"},
    {"assistant", "<think>\nAdd.\n</think>\n\n 4 "},
};

START_TEST(render_qwen3)
{
    expect_render(PAGODA_CHAT_QWEN3, think_conv, 4, true, NULL, NULL,
                  "<|im_start|>system\nBe brief.<|im_end|>\n"
                  "<|im_start|>user\nHi<|im_end|>\n"
                  "<|im_start|>assistant\nHello!<|im_end|>\n"
                  "<|im_start|>user\n2+2?<|im_end|>\n"
                  "<|im_start|>assistant\n");
    /* an answer after the last user message keeps its reasoning as given */
    expect_render(PAGODA_CHAT_QWEN3, think_conv + 3, 2, false, NULL, NULL,
                  "<|im_start|>user\n2+2?<|im_end|>\n"
                  "<|im_start|>assistant\n<think>\nAdd.\n</think>\n\n 4 <|im_end|>\n");
    /* a tool result the HTTP frontend already wrapped in <tool_response>
     * renders as a raw one does (not wrapped twice); a run is one user
     * turn; the answer before it, neither last nor reasoning, has no block */
    const pagoda_chat_message tr[] = {{"user", "x"}, {"assistant", "y"}, {"tool", "r1"},
                                      {"tool", "<tool_response>\nr2\n</tool_response>"}};
    const char *tr_want = "<|im_start|>user\nx<|im_end|>\n<|im_start|>assistant\ny<|im_end|>\n"
                          "<|im_start|>user\n<tool_response>\nr1\n</tool_response>\n<tool_response>\nr2\n"
                          "</tool_response><|im_end|>\n<|im_start|>assistant\n";
    expect_render(PAGODA_CHAT_QWEN3, tr, 4, true, NULL, NULL, tr_want);
    /* QwQ writes results alike (its earlier turn as given: no think block) */
    expect_render(PAGODA_CHAT_CHATML_THINK, tr, 4, false, NULL, NULL,
                  "<|im_start|>user\nx<|im_end|>\n<|im_start|>assistant\ny<|im_end|>\n"
                  "<|im_start|>user\n<tool_response>\nr1\n</tool_response>\n<tool_response>\nr2\n"
                  "</tool_response><|im_end|>\n");
    /* without reasoning it is ChatML */
    expect_render(PAGODA_CHAT_QWEN3, conv, 4, true, NULL, NULL,
                  "<|im_start|>system\nYou are terse.<|im_end|>\n"
                  "<|im_start|>user\nHi<|im_end|>\n"
                  "<|im_start|>assistant\nHello!<|im_end|>\n"
                  "<|im_start|>user\n2+2?<|im_end|>\n"
                  "<|im_start|>assistant\n");
}
END_TEST

START_TEST(render_glm4)
{
    expect_render(PAGODA_CHAT_GLM4, think_conv, 4, true, NULL, NULL,
                  "[gMASK]<sop><|system|>\nBe brief.<|user|>\nHi"
                  "<|assistant|>\n<think></think>\nHello!<|user|>\n2+2?<|assistant|>");
    /* after the last user message the reasoning is kept, stripped; the
     * answer stripped */
    expect_render(PAGODA_CHAT_GLM4, think_conv + 3, 2, false, NULL, NULL,
                  "[gMASK]<sop><|user|>\n2+2?<|assistant|>\n<think>Add.</think>\n4");
    /* an empty answer is left out */
    const pagoda_chat_message empty[] = {{"user", "x"}, {"assistant", "  "}};
    expect_render(PAGODA_CHAT_GLM4, empty, 2, false, NULL, NULL,
                  "[gMASK]<sop><|user|>\nx<|assistant|>\n<think></think>");
    /* tool results: one <|observation|> for a run, each in <tool_response> */
    const pagoda_chat_message tools[] = {{"user", "x"}, {"assistant", "<tool_call>f\n</tool_call>"},
                                         {"tool", "r1"}, {"tool", "r2"}, {"user", "y"}, {"tool", "r3"}};
    expect_render(PAGODA_CHAT_GLM4, tools, 6, true, NULL, NULL,
                  "[gMASK]<sop><|user|>\nx<|assistant|>\n<think></think>\n<tool_call>f\n</tool_call>"
                  "<|observation|>\n<tool_response>\nr1\n</tool_response>\n<tool_response>\nr2\n</tool_response>"
                  "<|user|>\ny<|observation|>\n<tool_response>\nr3\n</tool_response><|assistant|>");
}
END_TEST

/* Qwen3-Coder: ChatML, tool results a user turn as its template writes
 * them, a run of them one turn */
START_TEST(render_qwen3_coder)
{
    const pagoda_chat_message m[] = {{"user", "x"}, {"assistant", "<tool_call>\n<function=f>\n</function>\n</tool_call>"},
                                     {"tool", "r1"}, {"tool", "r2"}, {"assistant", "ok"}, {"tool", "r3"}};
    expect_render(PAGODA_CHAT_QWEN3_CODER, m, 6, true, NULL, NULL,
                  "<|im_start|>user\nx<|im_end|>\n<|im_start|>assistant\n<tool_call>\n<function=f>\n</function>\n"
                  "</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\nr1\n</tool_response>\n"
                  "<tool_response>\nr2\n</tool_response>\n<|im_end|>\n<|im_start|>assistant\nok<|im_end|>\n"
                  "<|im_start|>user\n<tool_response>\nr3\n</tool_response>\n<|im_end|>\n<|im_start|>assistant\n");
    /* its template has no reasoning to drop: an earlier turn is as given */
    expect_render(PAGODA_CHAT_QWEN3_CODER, think_conv + 1, 3, false, NULL, NULL,
                  "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\nThey greet.\n</think>\n\n"
                  "Hello!<|im_end|>\n<|im_start|>user\n2+2?<|im_end|>\n");
    /* without tool results it is ChatML */
    expect_render(PAGODA_CHAT_QWEN3_CODER, conv, 4, true, NULL, NULL,
                  "<|im_start|>system\nYou are terse.<|im_end|>\n"
                  "<|im_start|>user\nHi<|im_end|>\n"
                  "<|im_start|>assistant\nHello!<|im_end|>\n"
                  "<|im_start|>user\n2+2?<|im_end|>\n"
                  "<|im_start|>assistant\n");
}
END_TEST

/* Qwen3.5: Qwen3-Coder's results and calls, and it thinks (the cases
 * without reasoning after the last user message are renders.json's, from
 * its own template); these outputs are that template's, by jinja2 */
START_TEST(render_qwen35)
{
    /* after the last user message: the reasoning block, trimmed, the text
     * after it (its leading space kept, its end trimmed) */
    expect_render(PAGODA_CHAT_QWEN35, think_conv + 3, 2, false, NULL, NULL,
                  "<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n<think>\nAdd.\n</think>\n\n 4<|im_end|>\n");
    const pagoda_chat_message m[] = {{"user", "2+2?"}, {"assistant", "<think>\n Add. \n</think>\n\n 4 "}, {"tool", " r "}};
    pagoda_chat_opts off = {.enable_thinking = 0};
    char *out = NULL, err[128];
    ck_assert_int_eq(pagoda_chat_render_opts(PAGODA_CHAT_QWEN35, m, 3, true, NULL, NULL, &off, &out, err, sizeof err),
                     PAGODA_OK);
    ck_assert_str_eq(out, "<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n<think>\nAdd.\n</think>\n\n 4"
                          "<|im_end|>\n<|im_start|>user\n<tool_response>\nr\n</tool_response><|im_end|>\n"
                          "<|im_start|>assistant\n<think>\n\n</think>\n\n");
    free(out);
}
END_TEST

START_TEST(render_llama2)
{
    expect_render(PAGODA_CHAT_LLAMA2, conv, 4, true, NULL, NULL,
                  "<s>[INST] <<SYS>>\nYou are terse.\n<</SYS>>\n\nHi [/INST] Hello! </s>"
                  "<s>[INST] 2+2? [/INST]");
    /* without a system message, with the model's own BOS/EOS texts, contents stripped */
    const pagoda_chat_message m[] = {{"user", "  Hi \n"}, {"assistant", "Yo"}, {"user", "Bye"}};
    expect_render(PAGODA_CHAT_LLAMA2, m, 3, false, "<B>", "<E>",
                  "<B>[INST] Hi [/INST] Yo <E><B>[INST] Bye [/INST]");
}
END_TEST

START_TEST(render_llama3)
{
    expect_render(PAGODA_CHAT_LLAMA3, conv, 4, true, NULL, NULL,
                  "<|begin_of_text|>"
                  "<|start_header_id|>system<|end_header_id|>\n\nYou are terse.<|eot_id|>"
                  "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
                  "<|start_header_id|>assistant<|end_header_id|>\n\nHello!<|eot_id|>"
                  "<|start_header_id|>user<|end_header_id|>\n\n2+2?<|eot_id|>"
                  "<|start_header_id|>assistant<|end_header_id|>\n\n");
    /* "" means no BOS text */
    expect_render(PAGODA_CHAT_LLAMA3, conv + 1, 1, false, "", NULL,
                  "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>");
}
END_TEST

START_TEST(render_mistral)
{
    expect_render(PAGODA_CHAT_MISTRAL, conv, 4, true, NULL, NULL,
                  "<s>[INST] You are terse.\n\nHi [/INST]Hello!</s>[INST] 2+2? [/INST]");
    expect_render(PAGODA_CHAT_MISTRAL, conv + 1, 3, false, NULL, NULL,
                  "<s>[INST] Hi [/INST]Hello!</s>[INST] 2+2? [/INST]");
}
END_TEST

/* A tool result on the v0.1/v0.2 templates, which have no role for it
 * (their Jinja raises on any role but user and assistant): a user turn,
 * its text as the caller gives it (the HTTP frontend wraps it in
 * <tool_response> tags), each result a turn of its own, a system text
 * before it folded in as into any user turn. Llama 2 does the same. */
START_TEST(render_tool_result_as_user_turn)
{
    static const pagoda_chat_message m[] = {
        {"user", "Weather?"},
        {"assistant", "[TOOL_CALLS][{\"name\": \"get\", \"arguments\": {}}]"},
        {"tool", "<tool_response>\nsun\n</tool_response>"},
        {"tool", "<tool_response>\nrain\n</tool_response>"},
        {"assistant", "Mixed."},
        {"system", "Be brief."},
        {"tool", "late"},
    };
    expect_render(PAGODA_CHAT_MISTRAL, m, 7, true, NULL, NULL,
                  "<s>[INST] Weather? [/INST][TOOL_CALLS][{\"name\": \"get\", \"arguments\": {}}]</s>"
                  "[INST] <tool_response>\nsun\n</tool_response> [/INST]"
                  "[INST] <tool_response>\nrain\n</tool_response> [/INST]Mixed.</s>"
                  "[INST] Be brief.\n\nlate [/INST]");
    expect_render(PAGODA_CHAT_LLAMA2, m, 4, true, NULL, NULL,
                  "<s>[INST] Weather? [/INST] [TOOL_CALLS][{\"name\": \"get\", \"arguments\": {}}] </s>"
                  "<s>[INST] <tool_response>\nsun\n</tool_response> [/INST]"
                  "<s>[INST] <tool_response>\nrain\n</tool_response> [/INST]");
}
END_TEST

START_TEST(render_zephyr)
{
    expect_render(PAGODA_CHAT_ZEPHYR, conv, 4, true, NULL, NULL,
                  "<|system|>\nYou are terse.</s>\n"
                  "<|user|>\nHi</s>\n"
                  "<|assistant|>\nHello!</s>\n"
                  "<|user|>\n2+2?</s>\n"
                  "<|assistant|>\n");
    expect_render(PAGODA_CHAT_ZEPHYR, conv + 1, 1, false, NULL, "<|endoftext|>",
                  "<|user|>\nHi<|endoftext|>\n");
}
END_TEST

START_TEST(render_gemma)
{
    expect_render(PAGODA_CHAT_GEMMA, conv, 4, true, NULL, NULL,
                  "<bos><start_of_turn>user\nYou are terse.\n\nHi<end_of_turn>\n"
                  "<start_of_turn>model\nHello!<end_of_turn>\n"
                  "<start_of_turn>user\n2+2?<end_of_turn>\n"
                  "<start_of_turn>model\n");
    /* a lone system message still reaches the model, as a user turn */
    expect_render(PAGODA_CHAT_GEMMA, conv, 1, false, "", NULL,
                  "<start_of_turn>user\nYou are terse.<end_of_turn>\n");
}
END_TEST

START_TEST(render_errors)
{
    char *out = (char *)1, err[256] = "";
    const pagoda_chat_message bad[] = {{"user", "x"}, {NULL, "y"}};
    ck_assert_int_eq(pagoda_chat_render(PAGODA_CHAT_CHATML, bad, 2, true, NULL, NULL, &out, err, sizeof err),
                     PAGODA_ERR_INVALID);
    ck_assert_ptr_null(out);
    ck_assert_ptr_nonnull(strstr(err, "message 1"));
    ck_assert_int_eq(pagoda_chat_render(PAGODA_CHAT_CHATML, NULL, 2, true, NULL, NULL, &out, err, sizeof err),
                     PAGODA_ERR_INVALID);
    ck_assert_int_eq(pagoda_chat_render(PAGODA_CHAT_CHATML, conv, 1, true, NULL, NULL, NULL, err, sizeof err),
                     PAGODA_ERR_INVALID);
    /* empty conversation: just the generation prompt; NULL content is empty */
    expect_render(PAGODA_CHAT_CHATML, NULL, 0, true, NULL, NULL, "<|im_start|>assistant\n");
    const pagoda_chat_message nul[] = {{"user", NULL}};
    expect_render(PAGODA_CHAT_CHATML, nul, 1, false, NULL, NULL, "<|im_start|>user\n<|im_end|>\n");
}
END_TEST

/* Short realistic excerpts of each family's tokenizer.chat_template. */
static const char *T_QWEN2 =
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";
static const char *T_SMOLLM2 =
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\\n' }}"
    "{% endif %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";
static const char *T_CHATML_PLAIN =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
    "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";
static const char *T_QWEN25_SYS =
    "{%- if messages[0]['role'] == 'system' %}\n"
    "        {{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}\n"
    "    {%- else %}\n"
    "        {{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n' }}\n"
    "    {%- endif %}";
static const char *T_LLAMA2 =
    "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}"
    "{% set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}"
    "{% set system_message = false %}{% endif %}{% for message in loop_messages %}"
    "{% if loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\\n' + system_message + "
    "'\\n<</SYS>>\\n\\n' + message['content'] %}{% else %}{% set content = message['content'] %}{% endif %}"
    "{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}";
static const char *T_LLAMA3 =
    "{% set loop_messages = messages %}{% for message in loop_messages %}"
    "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + '<|eot_id|>' %}"
    "{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}";
static const char *T_MISTRAL =
    "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token}}{% else %}"
    "{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %}";
static const char *T_ZEPHYR =
    "{% for message in messages %}\n{% if message['role'] == 'user' %}\n{{ '<|user|>\n' + message['content'] + eos_token }}\n"
    "{% elif message['role'] == 'system' %}\n{{ '<|system|>\n' + message['content'] + eos_token }}\n"
    "{% elif message['role'] == 'assistant' %}\n{{ '<|assistant|>\n'  + message['content'] + eos_token }}\n"
    "{% endif %}\n{% if loop.last and add_generation_prompt %}\n{{ '<|assistant|>' }}\n{% endif %}\n{% endfor %}";
static const char *T_GEMMA =
    "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}"
    "{% for message in messages %}{% if (message['role'] == 'assistant') %}{% set role = 'model' %}"
    "{% else %}{% set role = message['role'] %}{% endif %}{{ '<start_of_turn>' + role + '\\n' + message['content'] | trim + "
    "'<end_of_turn>\\n' }}{% endfor %}{% if add_generation_prompt %}{{'<start_of_turn>model\\n'}}{% endif %}";
/* Qwen3's (excerpt: the reasoning split and the thinking switch) and
 * GLM-4.5's (its opening and turn markers). */
static const char *T_QWEN3 =
    "{%- set reasoning_content = message.content.split('</think>')[0].rstrip('\\n').split('<think>')[-1] %}"
    "{{- '<|im_start|>' + message.role + '\\n' + content }}{%- if add_generation_prompt %}"
    "{{- '<|im_start|>assistant\\n' }}{%- if enable_thinking is defined and enable_thinking is false %}"
    "{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}{%- endif %}";
static const char *T_GLM45 =
    "[gMASK]<sop>\n{% for m in messages %}{%- if m.role == 'user' -%}<|user|>\n{{ visible_text(m.content) }}"
    "{%- elif m.role == 'assistant' -%}\n<|assistant|>{%- endif -%}{%- endfor -%}"
    "{%- if add_generation_prompt -%}<|assistant|>{%- endif -%}";
/* Qwen3-Coder-30B-A3B-Instruct's (excerpt: a past call's rendering) */
static const char *T_QWEN3_CODER =
    "{%- for tool_call in message.tool_calls %}{{- '\\n<tool_call>\\n<function=' + tool_call.name + '>\\n' }}"
    "{%- for args_name, args_value in tool_call.arguments|items %}{{- '<parameter=' + args_name + '>\\n' }}"
    "{{- args_value }}{{- '\\n</parameter>\\n' }}{%- endfor %}{{- '</function>\\n</tool_call>' }}{%- endfor %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}";
/* Qwen3.5's (excerpt: a past call, and the generation prompt opening the
 * reasoning) */
static const char *T_QWEN35 =
    "{{- '<|im_start|>' + message.role + '\\n' + content }}{{- '<tool_call>\\n<function=' + tool_call.name + '>\\n' }}"
    "{{- '<parameter=' + args_name + '>\\n' }}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\\n\\n</think>\\n\\n' }}"
    "{%- else %}{{- '<think>\\n' }}{%- endif %}{%- endif %}";
/* DeepSeek-V3.1's (excerpt: the closed reasoning of its generation
 * prompt, a call's separator) and V3.2's (the same, and DSML calls) */
static const char *T_DEEPSEEK31 =
    "{%- if ns.is_last_user -%}{{'<\xEF\xBD\x9C" "Assistant\xEF\xBD\x9C><think></think>'}}{%- endif -%}"
    "{{'<\xEF\xBD\x9Ctool\xE2\x96\x81" "call\xE2\x96\x81" "begin\xEF\xBD\x9C>'+ tool['function']['name'] + "
    "'<\xEF\xBD\x9Ctool\xE2\x96\x81sep\xEF\xBD\x9C>'}}";
static const char *T_DEEPSEEK32 =
    "{%- set dsml_token = '\xEF\xBD\x9C" "DSML\xEF\xBD\x9C' -%}{{'<\xEF\xBD\x9C" "Assistant\xEF\xBD\x9C><think></think>'}}"
    "{{'<\xEF\xBD\x9Ctool\xE2\x96\x81sep\xEF\xBD\x9C>'}}{{'<think>'}}";
/* QwQ-32B's (excerpt: it thinks, its generation prompt opening the
 * block, but reads no reasoning_content) */
static const char *T_QWQ =
    "{%- set content = message.content.split('</think>')[-1].lstrip('\\n') %}"
    "{{- '<|im_start|>' + message.role + '\\n' + content + '<|im_end|>' + '\\n' }}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n<think>\\n' }}"
    "{%- if not enable_thinking -%}{{- '</think>' -}}{%- endif -%}{%- endif %}";
static const char *T_PHI3 =
    "{% for message in messages %}{% if message['role'] == 'system' %}{{'<|system|>\\n' + message['content'] + "
    "'<|end|>\\n'}}{% elif message['role'] == 'user' %}{{'<|user|>\\n' + message['content'] + '<|end|>\\n'}}"
    "{% endif %}{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}";

START_TEST(detect_families)
{
    ck_assert_int_eq(pagoda_chat_detect(T_QWEN2), PAGODA_CHAT_CHATML);
    ck_assert_int_eq(pagoda_chat_detect(T_SMOLLM2), PAGODA_CHAT_CHATML);
    ck_assert_int_eq(pagoda_chat_detect(T_CHATML_PLAIN), PAGODA_CHAT_CHATML);
    ck_assert_int_eq(pagoda_chat_detect(T_LLAMA2), PAGODA_CHAT_LLAMA2);
    ck_assert_int_eq(pagoda_chat_detect(T_LLAMA3), PAGODA_CHAT_LLAMA3);
    ck_assert_int_eq(pagoda_chat_detect(T_MISTRAL), PAGODA_CHAT_MISTRAL);
    ck_assert_int_eq(pagoda_chat_detect(T_ZEPHYR), PAGODA_CHAT_ZEPHYR);
    ck_assert_int_eq(pagoda_chat_detect(T_GEMMA), PAGODA_CHAT_GEMMA);
    ck_assert_int_eq(pagoda_chat_detect(T_PHI3), PAGODA_CHAT_UNKNOWN);
    ck_assert_int_eq(pagoda_chat_detect(T_QWEN3), PAGODA_CHAT_QWEN3);
    ck_assert_int_eq(pagoda_chat_detect(T_QWQ), PAGODA_CHAT_CHATML_THINK);
    ck_assert_int_eq(pagoda_chat_detect(T_GLM45), PAGODA_CHAT_GLM4);
    ck_assert_int_eq(pagoda_chat_detect(T_QWEN3_CODER), PAGODA_CHAT_QWEN3_CODER);
    ck_assert_int_eq(pagoda_chat_detect(T_QWEN35), PAGODA_CHAT_QWEN35);
    ck_assert_int_eq(pagoda_chat_detect(T_DEEPSEEK31), PAGODA_CHAT_DEEPSEEK31);
    ck_assert_int_eq(pagoda_chat_detect(T_DEEPSEEK32), PAGODA_CHAT_DEEPSEEK_R1); /* DSML calls: not V3.1's */
    ck_assert_int_eq(pagoda_chat_detect(NULL), PAGODA_CHAT_UNKNOWN);
    ck_assert_int_eq(pagoda_chat_detect(""), PAGODA_CHAT_UNKNOWN);
    ck_assert_int_eq(pagoda_chat_detect("{{ messages }}"), PAGODA_CHAT_UNKNOWN);
}
END_TEST

START_TEST(names_and_select)
{
    pagoda_chat_family f;
    const char *names[] = {"chatml", "llama2", "llama3", "mistral", "zephyr", "gemma", "qwen3", "glm4"};
    for (int i = 0; i < 8; i++) {
        ck_assert_int_eq(pagoda_chat_family_from_name(names[i], &f), PAGODA_OK);
        ck_assert_int_eq(f, i);
        ck_assert_str_eq(pagoda_chat_family_name(f), names[i]);
    }
    ck_assert_int_eq(pagoda_chat_family_from_name("auto", &f), PAGODA_ERR_INVALID);
    ck_assert_int_eq(pagoda_chat_family_from_name("vicuna", &f), PAGODA_ERR_INVALID);
    ck_assert_int_eq(pagoda_chat_family_from_name(NULL, &f), PAGODA_ERR_INVALID);
    ck_assert_str_eq(pagoda_chat_family_name(PAGODA_CHAT_UNKNOWN), "unknown");
    ck_assert_int_eq(pagoda_chat_family_from_name("qwen3-coder", &f), PAGODA_OK);
    ck_assert_int_eq(f, PAGODA_CHAT_QWEN3_CODER);
    ck_assert_str_eq(pagoda_chat_family_name(f), "qwen3-coder");
    ck_assert_int_eq(pagoda_chat_family_from_name("qwen3.5", &f), PAGODA_OK);
    ck_assert_int_eq(f, PAGODA_CHAT_QWEN35);
    ck_assert_str_eq(pagoda_chat_family_name(f), "qwen3.5");
    ck_assert_int_eq(pagoda_chat_family_from_name("deepseek-v3.1", &f), PAGODA_OK);
    ck_assert_int_eq(f, PAGODA_CHAT_DEEPSEEK31);
    ck_assert_int_eq(pagoda_chat_family_from_name("chatml-think", &f), PAGODA_OK);
    ck_assert_int_eq(f, PAGODA_CHAT_CHATML_THINK);
    ck_assert_str_eq(pagoda_chat_family_name(f), "chatml-think");
    ck_assert_str_eq(pagoda_chat_stop_strings(f)[0], "<|im_end|>");

    char msg[256];
    ck_assert_int_eq(pagoda_chat_select("auto", T_GEMMA, &f, msg, sizeof msg), PAGODA_OK);
    ck_assert_int_eq(f, PAGODA_CHAT_GEMMA);
    ck_assert_str_eq(msg, "");
    ck_assert_int_eq(pagoda_chat_select(NULL, T_PHI3, &f, msg, sizeof msg), PAGODA_OK);
    ck_assert_int_eq(f, PAGODA_CHAT_CHATML);
    ck_assert_ptr_nonnull(strstr(msg, "ChatML"));
    ck_assert_int_eq(pagoda_chat_select("", NULL, &f, msg, sizeof msg), PAGODA_OK);
    ck_assert_int_eq(f, PAGODA_CHAT_CHATML);
    ck_assert_ptr_nonnull(strstr(msg, "none"));
    /* a forced name wins over the template */
    ck_assert_int_eq(pagoda_chat_select("llama3", T_GEMMA, &f, msg, sizeof msg), PAGODA_OK);
    ck_assert_int_eq(f, PAGODA_CHAT_LLAMA3);
    ck_assert_int_eq(pagoda_chat_select("llama4", T_GEMMA, &f, msg, sizeof msg), PAGODA_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(msg, "llama4"));
}
END_TEST

START_TEST(stop_strings)
{
    ck_assert_str_eq(pagoda_chat_stop_strings(PAGODA_CHAT_CHATML)[0], "<|im_end|>");
    ck_assert_ptr_null(pagoda_chat_stop_strings(PAGODA_CHAT_CHATML)[1]);
    ck_assert_str_eq(pagoda_chat_stop_strings(PAGODA_CHAT_LLAMA3)[0], "<|eot_id|>");
    ck_assert_str_eq(pagoda_chat_stop_strings(PAGODA_CHAT_GEMMA)[0], "<end_of_turn>");
    ck_assert_str_eq(pagoda_chat_stop_strings(PAGODA_CHAT_ZEPHYR)[0], "</s>");
    ck_assert_str_eq(pagoda_chat_stop_strings(PAGODA_CHAT_LLAMA2)[0], "</s>");
    ck_assert_str_eq(pagoda_chat_stop_strings(PAGODA_CHAT_MISTRAL)[0], "</s>");
    ck_assert_str_eq(pagoda_chat_stop_strings(PAGODA_CHAT_UNKNOWN)[0], "<|im_end|>");
    ck_assert_str_eq(pagoda_chat_stop_strings(PAGODA_CHAT_QWEN3)[0], "<|im_end|>");
    const char *const *g = pagoda_chat_stop_strings(PAGODA_CHAT_GLM4);
    ck_assert_str_eq(g[0], "<|user|>");
    ck_assert_str_eq(g[1], "<|observation|>");
    ck_assert_str_eq(g[2], "<|endoftext|>");
    ck_assert_ptr_null(g[3]);
}
END_TEST

START_TEST(default_system_prompt)
{
    char buf[128];
    ck_assert(pagoda_chat_default_system(T_SMOLLM2, buf, sizeof buf));
    ck_assert_str_eq(buf, "You are a helpful AI assistant named SmolLM, trained by Hugging Face");
    ck_assert(pagoda_chat_default_system(T_QWEN2, buf, sizeof buf));
    ck_assert_str_eq(buf, "You are a helpful assistant.");
    /* the first <|im_start|>system literal holds a variable: skipped */
    ck_assert(pagoda_chat_default_system(T_QWEN25_SYS, buf, sizeof buf));
    ck_assert_str_eq(buf, "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.");
    ck_assert(!pagoda_chat_default_system(T_CHATML_PLAIN, buf, sizeof buf));
    ck_assert(!pagoda_chat_default_system(T_LLAMA3, buf, sizeof buf));
    ck_assert(!pagoda_chat_default_system(NULL, buf, sizeof buf));
    /* truncation keeps a terminated string */
    char small[8];
    ck_assert(pagoda_chat_default_system(T_QWEN2, small, sizeof small));
    ck_assert_str_eq(small, "You are");
}
END_TEST

/* ------------------------------------------ DeepSeek, Kimi K2, harmony */

#define DS_U "<\xEF\xBD\x9CUser\xEF\xBD\x9C>"
#define DS_A "<\xEF\xBD\x9C" "Assistant\xEF\xBD\x9C>"
#define DS_E "<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>"
#define DS_B "<\xEF\xBD\x9C" "begin\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>"

/* The reference templates (llama.cpp's models/templates: DeepSeek-R1
 * Distill, DeepSeek-V3.1, Kimi K2, gpt-oss, Qwen3-Coder, Qwen3.5, Qwen3,
 * QwQ, GLM-4.6) rendered by jinja2: tests/data/chat/make_renders.py wrote
 * renders.json; each case must match byte for byte. */
START_TEST(render_reference_templates)
{
    json_error_t je;
    json_t *root = json_load_file(tu_src("tests/data/chat/renders.json"), 0, &je);
    ck_assert_msg(root != NULL, "renders.json: %s", je.text);
    const char *date = json_string_value(json_object_get(root, "date"));
    json_t *cases = json_object_get(root, "cases");
    ck_assert_int_ge((int)json_array_size(cases), 111);
    size_t i;
    json_t *c;
    json_array_foreach(cases, i, c) {
        pagoda_chat_family f;
        const char *fam = json_string_value(json_object_get(c, "family"));
        ck_assert_int_eq(pagoda_chat_family_from_name(fam, &f), PAGODA_OK);
        json_t *ms = json_object_get(c, "messages");
        pagoda_chat_message m[16];
        int32_t n = (int32_t)json_array_size(ms);
        ck_assert_int_le(n, 16);
        for (int32_t k = 0; k < n; k++) {
            json_t *e = json_array_get(ms, (size_t)k);
            m[k].role = json_string_value(json_object_get(e, "role"));
            m[k].content = json_string_value(json_object_get(e, "content"));
        }
        json_t *kw = json_object_get(c, "kwargs");
        json_t *th = json_object_get(kw, "enable_thinking");
        pagoda_chat_opts o = {.enable_thinking = th ? json_is_true(th) : -1,
                              .reasoning_effort = json_string_value(json_object_get(kw, "reasoning_effort")),
                              .date = date};
        char *out = NULL, err[256] = "";
        int st = pagoda_chat_render_opts(f, m, n, json_is_true(json_object_get(c, "add_generation_prompt")),
                                         NULL, NULL, &o, &out, err, sizeof err);
        ck_assert_msg(st == PAGODA_OK, "%s / %s: %s", fam, json_string_value(json_object_get(c, "name")), err);
        const char *want = json_string_value(json_object_get(c, "expected"));
        ck_assert_msg(strcmp(out, want) == 0, "%s / %s:\n got  '%s'\n want '%s'", fam,
                      json_string_value(json_object_get(c, "name")), out, want);
        free(out);
    }
    json_decref(root);
}
END_TEST

/* DeepSeek-V3's own template (its tokenizer_config.json; not among
 * llama.cpp's files): checked by hand. */
START_TEST(render_deepseek3)
{
    static const pagoda_chat_message m[] = {
        {"system", "S1"}, {"system", "S2"}, {"user", "U1"}, {"assistant", "A1"},
        {"user", "U2"}, {"assistant", "calling"}, {"tool", "r1"}, {"tool", "r2"}, {"assistant", "done"},
    };
    expect_render(PAGODA_CHAT_DEEPSEEK3, m, 9, true, NULL, NULL,
                  DS_B "S1\n\nS2" DS_U "U1" DS_A "A1" DS_E DS_U "U2" DS_A "calling" DS_E
                  "<\xEF\xBD\x9Ctool\xE2\x96\x81outputs\xE2\x96\x81" "begin\xEF\xBD\x9C>"
                  "<\xEF\xBD\x9Ctool\xE2\x96\x81output\xE2\x96\x81" "begin\xEF\xBD\x9C>r1"
                  "<\xEF\xBD\x9Ctool\xE2\x96\x81output\xE2\x96\x81" "end\xEF\xBD\x9C>\n"
                  "<\xEF\xBD\x9Ctool\xE2\x96\x81output\xE2\x96\x81" "begin\xEF\xBD\x9C>r2"
                  "<\xEF\xBD\x9Ctool\xE2\x96\x81output\xE2\x96\x81" "end\xEF\xBD\x9C>"
                  "<\xEF\xBD\x9Ctool\xE2\x96\x81outputs\xE2\x96\x81" "end\xEF\xBD\x9C>done" DS_E DS_A);
    /* the model's own BOS text when the host passes it */
    expect_render(PAGODA_CHAT_DEEPSEEK3, m + 2, 1, true, "<s>", NULL, "<s>" DS_U "U1" DS_A);
}
END_TEST

START_TEST(render_thinking_and_effort)
{
    static const pagoda_chat_message u[] = {{"user", "hi"}};
    char *out = NULL, err[256] = "";
    /* Qwen3 with enable_thinking false: the template's empty think block */
    pagoda_chat_opts off = {.enable_thinking = 0};
    ck_assert_int_eq(pagoda_chat_render_opts(PAGODA_CHAT_QWEN3, u, 1, true, NULL, NULL, &off, &out, err, sizeof err),
                     PAGODA_OK);
    ck_assert_str_eq(out, "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
    free(out);
    /* QwQ (chatml-think): thinking on unless asked off, as the model's own
     * template (renders.json's cases pass the option explicitly: llama.cpp's
     * copy of the template closes the block when it is unset) */
    static const char *qwq_want[] = {"<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n</think>",
                                     "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n"};
    for (int th = -1; th <= 1; th++) {
        pagoda_chat_opts o = {.enable_thinking = th};
        ck_assert_int_eq(pagoda_chat_render_opts(PAGODA_CHAT_CHATML_THINK, u, 1, true, NULL, NULL, &o, &out, err,
                                                 sizeof err),
                         PAGODA_OK);
        ck_assert_str_eq(out, qwq_want[th != 0]);
        free(out);
    }
    /* harmony: the effort from the system prompt's "Reasoning:" line when the
     * request gives none; the request's wins */
    static const pagoda_chat_message sys[] = {{"system", "Be kind.\nReasoning: low"}, {"user", "hi"}};
    pagoda_chat_opts o = {.enable_thinking = -1, .date = "2026-01-15"};
    ck_assert_int_eq(pagoda_chat_render_opts(PAGODA_CHAT_HARMONY, sys, 2, true, NULL, NULL, &o, &out, err, sizeof err),
                     PAGODA_OK);
    ck_assert_ptr_nonnull(strstr(out, "\n\nReasoning: low\n\n"));
    free(out);
    o.reasoning_effort = "high";
    ck_assert_int_eq(pagoda_chat_render_opts(PAGODA_CHAT_HARMONY, sys, 2, true, NULL, NULL, &o, &out, err, sizeof err),
                     PAGODA_OK);
    ck_assert_ptr_nonnull(strstr(out, "\n\nReasoning: high\n\n"));
    free(out);
    /* bad input: an unknown effort, markup in an assistant turn, a tool result */
    o.reasoning_effort = "extreme";
    ck_assert_int_eq(pagoda_chat_render_opts(PAGODA_CHAT_HARMONY, sys, 2, true, NULL, NULL, &o, &out, err, sizeof err),
                     PAGODA_ERR_INVALID);
    ck_assert_ptr_null(out);
    ck_assert_ptr_nonnull(strstr(err, "reasoning_effort 'extreme'"));
    o.reasoning_effort = NULL;
    static const pagoda_chat_message mk[] = {{"user", "hi"}, {"assistant", "<|channel|>analysis<|message|>x"}};
    ck_assert_int_eq(pagoda_chat_render_opts(PAGODA_CHAT_HARMONY, mk, 2, true, NULL, NULL, &o, &out, err, sizeof err),
                     PAGODA_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(err, "message 1 (assistant) holds harmony markup"));
    static const pagoda_chat_message tl[] = {{"user", "hi"}, {"assistant", "x"}, {"tool", "r"}};
    ck_assert_int_eq(pagoda_chat_render_opts(PAGODA_CHAT_HARMONY, tl, 3, true, NULL, NULL, &o, &out, err, sizeof err),
                     PAGODA_ERR_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(err, "message 2 is a tool result without its function"));
    /* a past call: the template's header from its role; "assistant
     * written" (the call memo's) the header as the model wrote it */
    static const pagoda_chat_message calls[] = {{"user", "hi"},
                                                {"assistant to=functions.f", "{\"x\": 1}"},
                                                {"functions.f", "5"},
                                                {"assistant written", "<|channel|>commentary to=functions.f "
                                                                      "<|constrain|>json<|message|>{\"x\":2}"},
                                                {"functions.f", "6"}};
    ck_assert_int_eq(pagoda_chat_render_opts(PAGODA_CHAT_HARMONY, calls, 5, true, NULL, NULL, &o, &out, err,
                                             sizeof err), PAGODA_OK);
    ck_assert_msg(strstr(out, "<|start|>user<|message|>hi<|end|><|start|>assistant to=functions.f<|channel|>commentary "
                              "json<|message|>{\"x\": 1}<|call|><|start|>functions.f to=assistant<|channel|>commentary"
                              "<|message|>\"5\"<|end|><|start|>assistant<|channel|>commentary to=functions.f "
                              "<|constrain|>json<|message|>{\"x\":2}<|call|><|start|>functions.f to=assistant"
                              "<|channel|>commentary<|message|>\"6\"<|end|><|start|>assistant"), "%s", out);
    free(out);
    /* without a date, today's (UTC) is written: a well-formed one */
    o.date = NULL;
    ck_assert_int_eq(pagoda_chat_render_opts(PAGODA_CHAT_HARMONY, u, 1, true, NULL, NULL, &o, &out, err, sizeof err),
                     PAGODA_OK);
    const char *d = strstr(out, "Current date: ");
    ck_assert_ptr_nonnull(d);
    ck_assert(d[14 + 4] == '-' && d[14 + 7] == '-' && d[14 + 10] == '\n');
    free(out);
}
END_TEST

START_TEST(detect_agent_families)
{
    ck_assert_int_eq(pagoda_chat_detect("{{'<|start|>assistant<|channel|>final<|message|>' + m.content}}"),
                     PAGODA_CHAT_HARMONY);
    ck_assert_int_eq(pagoda_chat_detect("<|im_user|>user<|im_middle|>{{ m['content'] }}<|im_end|>"),
                     PAGODA_CHAT_KIMI_K2);
    ck_assert_int_eq(pagoda_chat_detect("{{'" DS_U "' + c}}{{'" DS_A "' + c + '" DS_E "'}}"),
                     PAGODA_CHAT_DEEPSEEK3);
    ck_assert_int_eq(pagoda_chat_detect("{{'" DS_U "' + c}}{{'" DS_A "<think>\\n'}}"), PAGODA_CHAT_DEEPSEEK_R1);
    const char *const *h = pagoda_chat_stop_strings(PAGODA_CHAT_HARMONY);
    ck_assert_str_eq(h[0], "<|return|>");
    ck_assert_str_eq(h[1], "<|call|>");
    ck_assert_ptr_null(h[2]);
    ck_assert_str_eq(pagoda_chat_stop_strings(PAGODA_CHAT_DEEPSEEK_R1)[0], DS_E);
    ck_assert_str_eq(pagoda_chat_stop_strings(PAGODA_CHAT_KIMI_K2)[0], "<|im_end|>");
    static const char *const names[] = {"deepseek3", "deepseek-r1", "kimi-k2", "harmony"};
    for (int i = 0; i < 4; i++) {
        pagoda_chat_family f;
        ck_assert_int_eq(pagoda_chat_family_from_name(names[i], &f), PAGODA_OK);
        ck_assert_str_eq(pagoda_chat_family_name(f), names[i]);
    }
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("chat_template");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, render_chatml);
    tcase_add_test(tc, render_llama2);
    tcase_add_test(tc, render_qwen3);
    tcase_add_test(tc, render_glm4);
    tcase_add_test(tc, render_qwen3_coder);
    tcase_add_test(tc, render_qwen35);
    tcase_add_test(tc, render_llama3);
    tcase_add_test(tc, render_mistral);
    tcase_add_test(tc, render_tool_result_as_user_turn);
    tcase_add_test(tc, render_zephyr);
    tcase_add_test(tc, render_gemma);
    tcase_add_test(tc, render_errors);
    tcase_add_test(tc, detect_families);
    tcase_add_test(tc, names_and_select);
    tcase_add_test(tc, stop_strings);
    tcase_add_test(tc, default_system_prompt);
    tcase_add_test(tc, render_reference_templates);
    tcase_add_test(tc, render_deepseek3);
    tcase_add_test(tc, render_thinking_and_effort);
    tcase_add_test(tc, detect_agent_families);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run(suite()); }
