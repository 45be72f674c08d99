/* test_chat_template.c: chat template detection and rendering
 * (core/chat_template.c): exact strings for every family, detection from
 * realistic Jinja excerpts, names, stop strings, default system prompts. */
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
    ck_assert_int_eq(pagoda_chat_detect(T_GLM45), PAGODA_CHAT_GLM4);
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

static Suite *suite(void)
{
    Suite *s = suite_create("chat_template");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, render_chatml);
    tcase_add_test(tc, render_llama2);
    tcase_add_test(tc, render_qwen3);
    tcase_add_test(tc, render_glm4);
    tcase_add_test(tc, render_llama3);
    tcase_add_test(tc, render_mistral);
    tcase_add_test(tc, render_zephyr);
    tcase_add_test(tc, render_gemma);
    tcase_add_test(tc, render_errors);
    tcase_add_test(tc, detect_families);
    tcase_add_test(tc, names_and_select);
    tcase_add_test(tc, stop_strings);
    tcase_add_test(tc, default_system_prompt);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run(suite()); }
